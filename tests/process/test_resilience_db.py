"""Database faults under a real worker: its connections are terminated again and again
while it drains a queue; it reconnects, and every job still runs exactly once."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from jobs.models import Job
from tests.conftest import side_effect_counts
from tests.process.resilience_support import running_worker, terminate_worker_connections
from tests.tasks import basic

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
