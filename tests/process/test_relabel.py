"""The engine installed under another app label (a project that already has an app called
``jobs``): a project AppConfig subclassing jobs.apps.JobsConfig with ``label = "jobqueue"``,
on a fresh database of its own. ``migrate``, enqueue through ``django.tasks``, a real
``runworker --burst``, the result, and the console's pages in the admin."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.process

COMMAND_TIMEOUT = 300

SETTINGS = """
from tests.settings import *  # noqa: F403

from jobs.apps import JobsConfig


class JobQueueConfig(JobsConfig):
    label = "jobqueue"


INSTALLED_APPS = [  # noqa: F405
    f"{__name__}.JobQueueConfig" if app == "jobs" else app for app in INSTALLED_APPS  # noqa: F405
]
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]  # noqa: F405 - the test client's host
"""


@pytest.fixture
def relabelled(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a project whose settings install the engine as ``jobqueue``, on a
    fresh database made for it and dropped afterwards."""
    (tmp_path / "relabel_settings.py").write_text(SETTINGS)
    server = subprocess_env()["DATABASE_URL"].rsplit("/", 1)[0]
    name = f"relabel_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield subprocess_env(
            DATABASE_URL=f"{server}/{name}",
            DJANGO_SETTINGS_MODULE="relabel_settings",
            PYTHONPATH=f"{tmp_path}:{ROOT}",
        )
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(*command: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_engine_runs_and_shows_its_console_under_another_app_label(relabelled: dict[str, str]) -> None:
    def manage(*arguments: str) -> str:
        return run(str(ROOT / "manage.py"), *arguments, env=relabelled)

    def check(step: str, *arguments: str) -> dict:
        return json.loads(run("-m", "tests.process.relabel_checks", step, *arguments, env=relabelled))

    manage("migrate", "--no-input")
    assert "[X] 0001_initial" in manage("showmigrations", "jobqueue")

    enqueued = check("enqueue")
    assert enqueued["status"] == "READY"
    manage("runworker", "--burst")
    assert check("result", enqueued["id"]) == {"status": "SUCCESSFUL", "return_value": 5}

    console = check("console", enqueued["id"])
    assert console["app_label"] == "jobqueue"
    pages = console["pages"]
    assert all(page["status"] == 200 for page in pages.values()), pages
    assert pages["changelist"]["url"].startswith("/admin/jobqueue/job/")
    assert pages["changelist"]["shows_job"] and pages["change"]["shows_job"]
    # The engine's own templates, whatever the label: the job list's counts and the detail
    # page's buttons live there.
    assert "admin/jobs/job/change_list.html" in pages["changelist"]["templates"]
    assert "admin/jobs/job/change_form.html" in pages["change"]["templates"]
    assert "admin/jobs/dashboard.html" in pages["dashboard"]["templates"]
