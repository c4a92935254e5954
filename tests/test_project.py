"""Project hygiene that CI enforces through the test suite."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.support.docs import DOCS


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
        [
            sys.executable,
            "-m",
            "mypy",
            "jobs",
            "config",
            "accounts",
            "notifications",
            "reports",
            "lab",
            "web",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- The documentation site (docs/, mkdocs.yml) ------------------------------------------
# Its samples run in tests/integration/test_docs_samples.py.


def test_docs_build_in_strict_mode(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        # Material's banner about its successor is not a warning about these pages.
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output


def test_the_settings_reference_lists_every_variable_with_its_default() -> None:
    settings_py = (ROOT / "config" / "settings.py").read_text()
    env_example = (ROOT / ".env.example").read_text()
    page = (DOCS / "reference" / "settings.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z][A-Z0-9_]*\*?)` \| ([^|]*) \|", page, re.M))
    names = set(re.findall(r'env\.\w+\(\s*"([A-Z][A-Z0-9_]+)"', settings_py))
    names |= set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", env_example, re.M))
    names = {"ANYMAIL_*" if name.startswith("ANYMAIL_") else name for name in names}
    assert names - set(rows) == set(), "variables missing from docs/reference/settings.md"
    for name, value in re.findall(r"^([A-Z][A-Z0-9_]+)=(.*)$", env_example, re.M):
        documented = rows[name].strip()
        assert documented == (f"`{value}`" if value else "empty"), f"{name}: {documented} != {value!r}"


def api_routes() -> set[str]:
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns: list[object], prefix: str) -> list[str]:
        found = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                found += walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                found.append(prefix + str(pattern.pattern))
        return found

    return {
        "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route)
        for route in walk(get_resolver().url_patterns, "")
        if route.startswith("api/")
    }


def test_the_api_reference_documents_every_api_route() -> None:
    page = (DOCS / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^#+ (?:[A-Z]+, )*[A-Z]+ (/api/\S*)$", page, re.M))
    routes = api_routes()
    assert routes - documented == set(), "routes missing from docs/reference/api.md"
    assert documented - routes == set(), "docs/reference/api.md names routes that do not exist"


def test_the_states_page_explains_every_state() -> None:
    from jobs.states import State

    headings = set(re.findall(r"^### (\w+)$", (DOCS / "explanation" / "states.md").read_text(), re.M))
    assert headings == {state.value for state in State}


def collected(*args: str) -> set[str]:
    """The test ids ``pytest --collect-only`` selects with ``args``, from the project's root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_plain_pytest_runs_the_fast_tiers_and_named_paths_run_the_drills() -> None:
    plain = collected()
    assert any(test.startswith("tests/unit/") for test in plain)
    assert any(test.startswith("tests/integration/") for test in plain)
    assert any(test.startswith("tests/e2e/") for test in plain)
    drills = (
        "tests/process/", "tests/pgbouncer/", "tests/replica/", "tests/fleet/", "tests/bootstrap/",
        "tests/downstream/",
    )  # fmt: skip
    assert not [test for test in plain if test.startswith(drills)]
    million = "tests/integration/test_claim.py::test_claim_cost_does_not_grow_with_a_million_delayed_rows"
    assert not [test for test in plain if test.startswith(million)]
    # What scripts/test runs without arguments: every tier, named (a named drill runs).
    fast = collected("tests/unit", "tests/integration", "tests/e2e", "tests/test_project.py")
    drilled = collected(*(drill.rstrip("/") for drill in drills))
    assert plain < fast | drilled
    assert any(test.startswith(million) for test in fast)
    assert any(test.startswith("tests/fleet/") for test in drilled)
    assert any(test.startswith("tests/downstream/") for test in drilled)


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
    # The worker's registry row is a worker internal.
    "jobs/worker/registry.py",
    # A dead executor's attempts fail per their job's own retry options, read here.
    "jobs/worker/settlement.py",
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
    # The list only shrinks: a module that no longer runs SQL of its own leaves it.
    assert found >= RAW_SQL_ALLOWED, sorted(RAW_SQL_ALLOWED - found)


# --- Module size --------------------------------------------------------------------------
# A module past MODULE_LINES is asking to be split along a seam one can name; one that stays
# longer says why in its docstring, in a sentence that begins "Longer than 400 lines because".
MODULE_LINES = 400
SIZED_APPS = ("jobs", "lab", "web", "accounts", "notifications", "reports")
# Past the limit today, each being split in work of its own. An entry that its module no
# longer needs fails the test, so this list only shrinks.
SPLIT_PENDING: set[str] = set()
_SAYS_WHY = re.compile(r"Longer than 400 lines because\s+\S")


def _too_long_without_a_reason(root: Path) -> set[str]:
    found = set()
    for app in SIZED_APPS:
        for path in (root / app).rglob("*.py"):
            relative = path.relative_to(root).as_posix()
            if "/migrations/" in relative:
                continue
            text = path.read_text()
            if len(text.splitlines()) <= MODULE_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if not _SAYS_WHY.search(docstring):
                found.add(relative)
    return found


def test_no_module_is_past_400_lines_without_saying_why() -> None:
    found = _too_long_without_a_reason(ROOT)
    unexplained = sorted(found - SPLIT_PENDING)
    assert not unexplained, (
        f"past {MODULE_LINES} lines with no 'Longer than 400 lines because ...' in the module's"
        f" docstring: {unexplained}"
    )
    assert not SPLIT_PENDING - found, (
        f"no longer past the limit; drop from SPLIT_PENDING: {sorted(SPLIT_PENDING - found)}"
    )


def test_the_module_size_check_reads_the_docstring(tmp_path: Path) -> None:
    # The check itself: a long module fails it unless its docstring (not a comment) says why.
    body = "x = 1\n" * MODULE_LINES
    cases = {
        "short.py": '"""Short."""\n',
        "silent.py": '"""A module."""\n' + body,
        "commented.py": "# Longer than 400 lines because it says so in a comment.\n" + body,
        "explained.py": '"""A module.\n\nLonger than 400 lines because its table is one piece.\n"""\n' + body,
        "migrations/0001_initial.py": body,
    }
    for name, text in cases.items():
        path = tmp_path / "jobs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert _too_long_without_a_reason(tmp_path) == {"jobs/silent.py", "jobs/commented.py"}
