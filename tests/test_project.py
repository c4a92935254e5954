"""Project hygiene that CI enforces through the test suite."""

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
        [sys.executable, "-m", "mypy", "jobs", "config", "accounts", "notifications"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
