"""Upgrading: a database made by the migrations of the previous release (jobs 0014), with
rows in every state, migrates forward to today's schema in place, and a worker then finishes
its work: nothing is lost, nothing runs twice, the running row keeps its lease."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT

pytestmark = pytest.mark.process

# The last migration of the previous release: what an installed database holds.
PREVIOUS = "0014_wake_check"
TASK = "tests.tasks.basic.noop"


@pytest.fixture
def old_database() -> Iterator[str]:
    settings = connection.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
    server = f"postgres://{settings['USER'] or 'postgres'}@{host}:{port}"
    name = f"jobs_upgrade_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT), "JOBS_LAB": "false"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


# One row per state the previous release could hold, as that release wrote them.
ROWS = {
    "queued": "state = 'queued'",
    "scheduled": "state = 'scheduled', run_at = now() + interval '1 hour'",
    "running": "state = 'running', attempt = 1, started_attempt = 1, worker_id = gen_random_uuid(), "
    "lease_expires_at = now() + interval '1 hour', started_at = now()",
    "succeeded": "state = 'succeeded', attempt = 1, started_attempt = 1, finished_at = now(), result = '7'",
    "dead": "state = 'dead', attempt = 3, started_attempt = 3, finished_at = now(), last_error = 'boom'",
    "cancelled": "state = 'cancelled', finished_at = now()",
    "expired": "state = 'expired', finished_at = now()",
}


def test_a_database_of_the_previous_release_migrates_forward_with_its_rows(old_database: str) -> None:
    manage(old_database, "migrate", "jobs", PREVIOUS, "--noinput")
    ids: dict[str, uuid.UUID] = {}
    with psycopg.connect(old_database, autocommit=True) as db:
        for state, values in ROWS.items():
            ids[state] = uuid.uuid4()
            db.execute(
                "INSERT INTO jobs_job (id, task_path, args, kwargs, queue_name, priority, max_attempts) "
                "VALUES (%s, %s, '[]', '{}', 'default', 0, 3)",
                [ids[state], TASK],
            )
            db.execute(f"UPDATE jobs_job SET {values} WHERE id = %s", [ids[state]])
        before = dict(
            db.execute("SELECT id, row_to_json(j)::jsonb - 'limit_wait' FROM jobs_job j").fetchall()
        )

    manage(old_database, "migrate", "--noinput")

    with psycopg.connect(old_database, autocommit=True) as db:
        after = dict(db.execute("SELECT id, row_to_json(j)::jsonb FROM jobs_job j").fetchall())
        # Every row is there, each column it had keeps its value (new columns only added).
        assert after.keys() == before.keys()
        for job_id, old in before.items():
            assert {key: after[job_id][key] for key in old} == old, job_id
        # The running row is still running under its lease, with no cancel pending.
        running = after[ids["running"]]
        assert running["state"] == "running" and running["cancel_requested_at"] is None
        # Today's database functions are the ones the files hold (the last migration loads them).
        functions = {row[0] for row in db.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'jobs_%'")}
        assert {"jobs_limit_left_running", "jobs_queue_has_due"} <= functions

    # The queued row runs once on today's worker; the rest are left as they were.
    manage(old_database, "runworker", "--burst", "--queues", "default")
    with psycopg.connect(old_database, autocommit=True) as db:
        states = dict(db.execute("SELECT id, state FROM jobs_job").fetchall())
        attempts = dict(db.execute("SELECT id, attempt FROM jobs_job").fetchall())
    assert states[ids["queued"]] == "succeeded" and attempts[ids["queued"]] == 1
    assert {state: states[ids[state]] for state in ROWS if state != "queued"} == {
        state: state for state in ROWS if state != "queued"
    }
