"""The engine as a user gets it: its wheel, built from this checkout, installed into a fresh
virtualenv with Django from PyPI, in a project made by ``django-admin startproject`` (the
default user model, the stock admin URLconf), on a database of its own. Enqueue through
``django.tasks``, ``runworker --burst``, the result, the console's pages in the admin, and
``runscheduler`` firing a slot.

Needs PyPI (the build backend and the project's dependencies are downloaded)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.downstream

HERE = Path(__file__).resolve().parent
INSTALL_TIMEOUT = 600
COMMAND_TIMEOUT = 300


def interpreter(version: str) -> str | None:
    """A Python of that version that runs (a pyenv shim on PATH may not: it names a version
    that is not selected)."""
    pyenv = sorted(Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python{version}"))
    for candidate in [shutil.which(f"python{version}"), *map(str, pyenv)]:
        if (
            candidate
            and subprocess.run([candidate, "-c", ""], capture_output=True, timeout=60).returncode == 0
        ):
            return candidate
    return None


SHOP_TASKS = """from django.tasks import task


@task()
def add(a, b):
    return a + b
"""

SETTINGS = """
INSTALLED_APPS += ["django.contrib.postgres", "jobs", "shop"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", **{database!r}}}}}
TASKS = {{"default": {{"BACKEND": "jobs.backend.PostgresBackend"}}}}
JOBS = {{"SCHEDULES": {{"shop.add": {{"task": "shop.tasks.add", "interval": 1, "args": [20, 22]}}}}}}
ALLOWED_HOSTS = ["testserver"]
"""


def run(*command: str | Path, cwd: Path, timeout: float = COMMAND_TIMEOUT) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        # The suite's own settings and paths must not leak into the downstream project.
        env={k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")},
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", out, ROOT, cwd=ROOT, timeout=INSTALL_TIMEOUT)
    (built,) = out.glob("*.whl")
    return built


def server() -> dict[str, object]:
    url = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/jobqueue"))
    return {
        "HOST": url.hostname or "127.0.0.1",
        "PORT": url.port or 5432,
        "USER": unquote(url.username or "postgres"),
        "PASSWORD": unquote(url.password or ""),
    }


@pytest.fixture
def database() -> Iterator[dict[str, object]]:
    """A fresh database of the project's own on the suite's server, dropped afterwards."""
    where = server()
    name = f"downstream_{uuid.uuid4().hex[:12]}"
    admin = {"host": where["HOST"], "port": where["PORT"], "user": where["USER"], "dbname": "postgres"}
    if where["PASSWORD"]:
        admin["password"] = where["PASSWORD"]
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {**where, "NAME": name}
    finally:
        with psycopg.connect(**admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize(
    ("version", "django"),
    [
        pytest.param(
            f"{sys.version_info.major}.{sys.version_info.minor}",
            "Django>=6.1,<6.2",
            id=f"python{sys.version_info.major}.{sys.version_info.minor}-django6.1",
        ),
        pytest.param("3.12", "Django>=6.0,<6.1", id="python3.12-django6.0"),
    ],
)
def test_a_startproject_site_runs_the_engine_from_its_wheel(
    version: str, django: str, wheel: Path, database: dict[str, object], tmp_path: Path
) -> None:
    python = (
        sys.executable
        if version == f"{sys.version_info.major}.{sys.version_info.minor}"
        else interpreter(version)
    )
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    venv = tmp_path / "venv"
    run(python, "-m", "venv", venv, cwd=tmp_path)
    bin_ = venv / "bin"
    run(bin_ / "python", "-m", "pip", "install", "-q", f"{wheel}[binary]", django, cwd=tmp_path,
        timeout=INSTALL_TIMEOUT)  # fmt: skip
    installed = json.loads(run(bin_ / "python", "-m", "pip", "list", "--format=json", cwd=tmp_path))
    names = {package["name"].lower() for package in installed}
    # Only the engine's own dependencies: nothing of this project's product comes along.
    assert not names & {"django-anymail", "httpx", "google-auth", "whitenoise", "django-environ"}

    project = tmp_path / "project"
    project.mkdir()
    run(bin_ / "django-admin", "startproject", "mysite", project, cwd=tmp_path)
    (project / "shop").mkdir()
    (project / "shop" / "__init__.py").touch()
    (project / "shop" / "tasks.py").write_text(SHOP_TASKS)
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write(SETTINGS.format(database=database))
    shutil.copy(HERE / "project_checks.py", project)

    def manage(*arguments: str) -> str:
        return run(bin_ / "python", "manage.py", *arguments, cwd=project)

    def check(step: str, *arguments: str) -> dict:
        return json.loads(run(bin_ / "python", "project_checks.py", step, *arguments, cwd=project))

    manage("check")
    manage("migrate", "--no-input")

    enqueued = check("enqueue")
    assert enqueued["status"] == "READY"
    manage("runworker", "--burst")
    assert check("result", enqueued["id"]) == {"status": "SUCCESSFUL", "return_value": 5}

    pages = check("console", enqueued["id"])
    assert pages["admin:jobs_job_changelist"] == {"status": 200, "lists_job": True}
    assert pages["admin:jobs_job_dashboard"]["status"] == 200

    # The first pass syncs the declared schedule and sets its first slot a second ahead;
    # a later pass fires it.
    deadline = time.monotonic() + 60
    while (fired := check("fires"))["fires"] == 0 and time.monotonic() < deadline:
        manage("runscheduler", "--once")
        time.sleep(0.5)
    assert fired["fires"] >= 1
    assert fired["jobs"] == 1 + fired["fires"]
