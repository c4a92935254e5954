"""Database faults under a real worker: its connections are terminated again and again
while it drains a queue, or the database turns everyone away for a while; it reconnects,
and every job still runs exactly once."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import psycopg
import psycopg.sql
import pytest
from django.db import connection

from jobs.models import Job
from tests.conftest import side_effect_counts
from tests.support.workers import running_worker, terminate_worker_connections, wait_until
from tests.tasks import basic, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]

JOBS = 400


def test_terminated_connections_mid_run_lose_nothing_and_run_nothing_twice(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "2") as worker:
        calls = [((f"job-{i}", 0.01), {}) for i in range(JOBS)]
        ids = [uuid.UUID(r.id) for r in basic.sleep_then_record.enqueue_many(calls)]
        terminated = 0
        deadline = time.monotonic() + 60
        while Job.objects.filter(id__in=ids, state="succeeded").count() < JOBS:
            assert time.monotonic() < deadline, f"not drained\n{worker.log()}"
            # The executors' claim/outcome connections and the supervisor's housekeeping one.
            terminated += terminate_worker_connections()
            time.sleep(0.15)
        assert worker.proc.poll() is None, "the worker exited"

    assert terminated >= 10
    log = worker.log()
    assert "event=db_connection_lost" in log or "event=db_unavailable" in log
    assert "event=db_reconnected" in log
    counts = side_effect_counts()
    assert len(counts) == JOBS
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    # No attempt was spent on a fault of the worker's own connection.
    assert set(Job.objects.filter(id__in=ids).values_list("attempt", flat=True)) == {1}


def _allow_connections(allow: bool) -> None:
    # A database cannot turn connections away from itself: ask from the maintenance one.
    settings = connection.settings_dict
    with psycopg.connect(
        dbname="postgres",
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"],
        autocommit=True,
    ) as admin:
        name = psycopg.sql.Identifier(settings["NAME"])
        admin.execute(psycopg.sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(name, allow))


def test_worker_rides_out_a_database_outage(tmp_path: Path) -> None:
    # Like a restart, for this test database alone: every other session is cut off and
    # no new one is let in for two seconds (this test keeps its own session).
    jobs = 200
    with running_worker(tmp_path, "--concurrency", "2") as worker:
        calls = [((f"job-{i}", 0.01), {}) for i in range(jobs)]
        ids = [uuid.UUID(r.id) for r in resilience.record_patiently.enqueue_many(calls)]
        wait_until(lambda: len(side_effect_counts()) >= 20)
        try:
            _allow_connections(False)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            time.sleep(2)
            assert worker.proc.poll() is None, "the worker exited"
            assert Job.objects.filter(id__in=ids, state="succeeded").count() < jobs
        finally:
            _allow_connections(True)
        wait_until(lambda: Job.objects.filter(id__in=ids, state="succeeded").count() == jobs, timeout=30)
        assert worker.proc.poll() is None

    log = worker.log()
    assert "event=db_connect_failed conn=jobs-executor" in log
    assert "event=db_unavailable" in log
    counts = side_effect_counts()
    assert len(counts) == jobs
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
