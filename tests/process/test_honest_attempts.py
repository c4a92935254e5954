"""Attempts are counted honestly when a whole worker dies or is told to stop: jobs it had
claimed but not started go back without using an attempt, at once on SIGTERM and through
the reaper after kill -9; a dead worker's jobs are runnable again within about one lease,
however long the lease (issue 7, points 3 and 6)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.db import connection, transaction

from jobs.models import Job
from jobs.states import State
from tests.conftest import side_effect_counts
from tests.support.workers import job, running_worker, start_marked, wait_until
from tests.tasks import basic, hostile, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]

# A prefetch horizon so long that an executor keeps a whole batch behind its slow job, as
# one with a big batch does for a moment: the case where rows are claimed but not started.
HOLD_BATCH = {"JOBS_PREFETCH_HORIZON": "60", "JOBS_LEASE_SECONDS": "2"}


def _slow_job_with_a_batch_behind_it(worker_tmp: Path) -> tuple[str, list[str]]:
    warm = basic.record.enqueue_many([((f"warm-{n}",), {}) for n in range(20)])
    wait_until(lambda: all(job(r.id).state == State.SUCCEEDED for r in warm), timeout=20)
    with transaction.atomic():
        slow = hostile.sleep_and_record.using(max_attempts=1).enqueue("slow", 30.0).id
        behind = [
            r.id
            for r in basic.record.using(max_attempts=1).enqueue_many([((f"b-{n}",), {}) for n in range(20)])
        ]
    wait_until(lambda: side_effect_counts().get("slow:start"), timeout=20, message="the slow job to start")
    assert Job.objects.filter(id__in=behind, state=State.RUNNING).count() == 20
    return slow, behind


def test_kill_9_of_a_worker_gives_its_unstarted_jobs_back_unused(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", name="doomed", **HOLD_BATCH) as doomed:
        slow, behind = _slow_job_with_a_batch_behind_it(tmp_path)
        # Its start is written within about 10 ms of it (the feeder's FLUSH_AFTER); killed
        # before that, it would come back unused, as a job that never began.
        wait_until(lambda: start_marked(slow), timeout=5, message="the slow job's start mark")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
    with running_worker(tmp_path, "--concurrency", "2", name="rescuer", JOBS_LEASE_SECONDS="2"):
        wait_until(lambda: all(job(i).state == State.SUCCEEDED for i in behind), timeout=20)
        wait_until(lambda: job(slow).state == State.DEAD, timeout=20)
    for job_id in behind:
        done = job(job_id)
        # max_attempts=1: had the claim used it, the job would be dead "worker lost".
        assert (done.attempt, done.errors, done.handbacks) == (1, [], 1)
    lost = job(slow)
    assert (lost.attempt, lost.last_error) == (1, "worker lost")
    assert all(side_effect_counts()[f"b-{n}"] == 1 for n in range(20))


def test_sigterm_hands_back_unstarted_jobs_at_once_while_the_running_one_finishes(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", **HOLD_BATCH) as worker:
        slow, behind = _slow_job_with_a_batch_behind_it(tmp_path)
        worker.signal(signal.SIGTERM)
        # Handed back now, not when the slow handler returns (a container's grace period
        # would kill the worker first).
        wait_until(lambda: Job.objects.filter(id__in=behind, state=State.QUEUED).count() == 20, timeout=3)
        assert job(slow).state == State.RUNNING
        assert [job(i).attempt for i in behind] == [0] * 20


@pytest.mark.parametrize("lease", [2.0, 300.0])
def test_a_dead_workers_job_is_runnable_again_within_its_lease(tmp_path: Path, lease: float) -> None:
    with running_worker(tmp_path, "--concurrency", "1", name="doomed") as doomed:
        victim = resilience.hang_on_first_attempt.using(lease_seconds=lease).enqueue("victim").id
        wait_until(lambda: side_effect_counts().get("victim:start"), timeout=20)
        # The rescuer uses the default reaper settings, and has been running a while (past
        # any first pass a reaper makes when it starts).
        with running_worker(
            tmp_path, "--concurrency", "1", name="rescuer", JOBS_REAPER_INTERVAL="30"
        ) as rescuer:
            time.sleep(5.5)
            os.killpg(doomed.pid, signal.SIGKILL)
            doomed.wait()
            if lease > 10:
                # Move the clock for this lease instead of waiting five minutes.
                with connection.cursor() as cursor:
                    cursor.execute("UPDATE jobs_job SET lease_expires_at = now() WHERE id = %s", [victim])
            # About what is left of the lease, plus the reaper's grace and jitter.
            wait_until(lambda: job(victim).state == State.SUCCEEDED, timeout=3.5)
            assert "event=reaped" in rescuer.log()
    assert side_effect_counts() == {"victim:start": 2, "victim:end": 1}
