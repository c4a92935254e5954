"""The worker registry kept by real workers: one row each, fresh while alive, gone after a
clean exit, expired after an unclean one."""

from __future__ import annotations

import signal
import socket
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

from jobs.models import Worker
from jobs.worker import registry
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_worker_keeps_a_row_while_alive_and_removes_it_on_clean_exit(tmp_path: Path) -> None:
    with running_worker(
        tmp_path,
        "--concurrency",
        "2",
        "--queues",
        "default:3,email:1",
        "--shutdown-timeout",
        "0.5",
        JOBS_LEASE_SECONDS="1.5",
    ) as worker:
        row = wait_until(lambda: Worker.objects.filter(pid=worker.pid).first())
        assert (row.hostname, row.queues, row.concurrency) == (socket.gethostname(), "default:3,email:1", 2)
        assert row.started_at <= row.last_heartbeat_at

        hanging = resilience.hang_on_first_attempt.enqueue("hanging").id
        wait_until(lambda: Worker.objects.get(pid=worker.pid).jobs_in_hand == 1)
        fresh = Worker.objects.get(pid=worker.pid)
        assert fresh.last_heartbeat_at > row.last_heartbeat_at
        assert len(fresh.slot_tokens) == 2
        assert job(hanging).worker_id in fresh.slot_tokens

        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0

    assert not Worker.objects.filter(pid=worker.pid).exists()


def test_rows_of_workers_that_died_expire(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", name="killed") as killed:
        wait_until(lambda: Worker.objects.filter(pid=killed.pid).exists())
        killed.signal(signal.SIGKILL)
        killed.wait()
    assert Worker.objects.filter(pid=killed.pid).exists()

    # Any live worker's reaper deletes rows that stopped beating long ago...
    gone = Worker.objects.create(
        id=uuid.uuid4(), hostname="gone", pid=1, queues="default:1", concurrency=1, jobs_in_hand=0
    )
    Worker.objects.filter(id=gone.id).update(last_heartbeat_at=gone.started_at - timedelta(hours=1))
    with running_worker(tmp_path, "--concurrency", "1", name="alive") as alive:
        wait_until(lambda: not Worker.objects.filter(id=gone.id).exists())
        assert Worker.objects.filter(pid=alive.pid).exists()
        # ...and not the recently killed one, whose row is not stale yet.
        assert Worker.objects.filter(pid=killed.pid).exists()

    # Once it is (moving the database clock), it goes too.
    with connection.cursor() as cursor:
        later = Worker.objects.get(pid=killed.pid).last_heartbeat_at + timedelta(
            seconds=registry.EXPIRE_AFTER_SECONDS + 1
        )
        assert registry.expire(cursor, now=later) >= 1
    assert not Worker.objects.filter(pid=killed.pid).exists()
