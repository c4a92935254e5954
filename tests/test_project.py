"""Project hygiene that CI enforces through the test suite."""

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_migrations_are_complete(db: None) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "jobs", "config", "accounts", "notifications", "web"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_layer_contracts_hold() -> None:
    """pyproject.toml's [tool.importlinter] contracts: jobs imports no app above it, the apps
    import each other only through declared services, web-side engine code does not import
    the worker, and jobs' top-level modules form no cycle."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout + result.stderr


# Modules that still run their own statements, each for a reason; everything else reads
# through <app>/selectors.py and writes through jobs/store/.
RAW_SQL_ALLOWED = {
    # The connections outside Django's, and commands about a connection rather than data:
    # the pooler probe's backend pid, the scheduler's LISTEN.
    "jobs/db.py", "jobs/pooler.py", "jobs/scheduler/runner.py",
    # The dedupe window's lapse on a side connection; it joins jobs/store/enqueue.py with
    # the enqueue options' rework.
    "jobs/backend.py",
    # The worker runs the store's statements on its own connection; its registry row and
    # the housekeeper's batch calls are worker internals.
    "jobs/worker/executor.py", "jobs/worker/housekeeper.py", "jobs/worker/registry.py",
    # The console's aggregates, read and folded by their own module (the dashboard, the
    # metrics endpoint, the CLI and the housekeeper share it).
    "jobs/stats.py",
    # ORM expressions the ORM cannot spell (a JSON path, the search's OR of index-served
    # clauses), not statements of their own.
    "jobs/console/admin.py", "jobs/console/changelist.py",
    # The replica's own recovery state, on the replica's connection.
    "jobs/console/replica.py",
    # A handler's cancel check, on the handler's database alias.
    "jobs/progress.py",
    # Declared limits registered on the caller's cursor at startup.
    "jobs/limits.py",
    # Apps' own tables, each module the one owner of its statement: the signup cooldowns,
    # a push delivery's claim, a report's streamed read, an import chunk's upsert.
    "accounts/cooldowns.py", "notifications/push/sending.py", "reports/reporting.py",
    "reports/importing.py",
    # Benchmarks, drills and the fleet simulator (leaving for lab/).
    "jobs/benchmark.py", "jobs/benchmark_limits.py", "jobs/chaos.py", "jobs/fleet.py",
    "jobs/workflows/benchmark.py", "notifications/push/benchmark.py", "reports/benchmark.py",
    "jobs/management/commands/bench_console.py", "jobs/management/commands/bench_scale.py",
}  # fmt: skip


def test_raw_sql_lives_in_the_store_and_the_selectors() -> None:
    statement = re.compile(r"\.execute\(|RawSQL\(")
    found = set()
    for app in ("jobs", "accounts", "notifications", "reports", "web"):
        for path in (ROOT / app).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            outside = not relative.startswith("jobs/store/") and path.name != "selectors.py"
            if outside and "/migrations/" not in relative and statement.search(path.read_text()):
                found.add(relative)
    assert found <= RAW_SQL_ALLOWED, sorted(found - RAW_SQL_ALLOWED)
