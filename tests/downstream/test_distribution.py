"""What the engine's distribution carries: ``python -m build`` makes a wheel and an sdist that
``twine check --strict`` passes, with the engine's SQL, migrations, templates and management
commands in both, and nothing of this repository's product (accounts, notifications, reports,
the demos, web/, config/, the lab) or its tests.

Needs PyPI (the build backend is downloaded into build's isolated environment)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from jobs import __version__
from tests.conftest import ROOT

pytestmark = pytest.mark.downstream

BUILD_TIMEOUT = 600
# Top-level folders of this repository that are not the engine.
NOT_THE_ENGINE = {"accounts", "notifications", "reports", "demos", "web", "config", "lab", "tests", "docs"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def engine_files() -> set[str]:
    """The files under jobs/ that must ship: SQL, migrations, templates, commands."""
    wanted = set()
    for pattern in ("sql/**/*.sql", "migrations/0*.py", "templates/**/*.html", "management/commands/*.py"):
        wanted |= {path.relative_to(ROOT).as_posix() for path in (ROOT / "jobs").glob(pattern)}
    return wanted


def test_twine_passes_both_files_and_they_carry_the_version(dist: Path) -> None:
    files = sorted(dist.iterdir())
    expected = [f"jobqueue-{__version__}-py3-none-any.whl", f"jobqueue-{__version__}.tar.gz"]
    assert [f.name for f in files] == expected
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_wheel_is_the_engine_with_its_sql_migrations_templates_and_commands(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"jobs", f"jobqueue-{__version__}.dist-info"}, tops & NOT_THE_ENGINE
    missing = engine_files() - names
    assert not missing, sorted(missing)
    assert not {name for name in names if "__pycache__" in name or name.endswith(".pyc")}


def test_the_sdist_is_the_engine_its_changelog_and_no_tests(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    prefix = f"jobqueue-{__version__}/"
    with tarfile.open(sdist) as archive:
        names = {member.name.removeprefix(prefix) for member in archive.getmembers() if member.isfile()}
    tops = {name.split("/", 1)[0] for name in names}
    assert not tops & NOT_THE_ENGINE, sorted(tops & NOT_THE_ENGINE)
    assert {"pyproject.toml", "README.md", "CHANGELOG.md"} <= names
    missing = engine_files() - names
    assert not missing, sorted(missing)
