"""Project hygiene that CI enforces through the test suite."""

import os
import subprocess
import sys

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
        [sys.executable, "-m", "mypy", "jobs", "config", "accounts", "notifications", "reports", "lab"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


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
    drills = ("tests/process/", "tests/pgbouncer/", "tests/replica/", "tests/fleet/", "tests/bootstrap/")
    assert not [test for test in plain if test.startswith(drills)]
    million = "tests/integration/test_claim.py::test_claim_cost_does_not_grow_with_a_million_delayed_rows"
    assert not [test for test in plain if test.startswith(million)]
    # What scripts/test runs without arguments: every tier, named (a named drill runs).
    fast = collected("tests/unit", "tests/integration", "tests/e2e", "tests/test_project.py")
    drilled = collected("tests/process", "tests/pgbouncer", "tests/replica", "tests/fleet", "tests/bootstrap")
    assert plain < fast | drilled
    assert any(test.startswith(million) for test in fast)
    assert any(test.startswith("tests/fleet/") for test in drilled)
