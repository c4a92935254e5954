"""Graceful shutdown of a real worker: SIGTERM/SIGINT stop claiming, let running jobs
finish within --shutdown-timeout, give the rest back without using an attempt, exit 0;
a second signal exits at once."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from django.db import transaction

from jobs.models import Job
from tests.conftest import side_effect_counts
from tests.support.workers import (
    all_in_state,
    is_alive,
    job,
    running_worker,
    wait_until,
)
from tests.tasks import basic, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_sigterm_mid_batch_records_finished_jobs_and_gives_back_the_rest(tmp_path: Path) -> None:
    # A long prefetch horizon makes the executor hold several slow jobs per claim, so that
    # some are claimed but not started when the signal comes.
    with running_worker(
        tmp_path, "--concurrency", "1", "--shutdown-timeout", "10", JOBS_PREFETCH_HORIZON="3"
    ) as worker:
        first = resilience.sleep_and_record.enqueue("first", 0.3).id
        wait_until(lambda: job(first).state == "succeeded")
        calls = [((f"job-{i}", 0.3), {}) for i in range(10)]
        batch = [uuid.UUID(r.id) for r in resilience.sleep_and_record.enqueue_many(calls)]
        wait_until(lambda: side_effect_counts().get("job-1:start") or side_effect_counts().get("job-2:start"))
        assert Job.objects.filter(id__in=batch, state="running").count() > 2, "a batch is in hand"

        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0

    assert "event=worker_stopped" in worker.log()
    jobs = {j.id: j for j in Job.objects.filter(id__in=batch)}
    finished = [i for i in batch if jobs[i].state == "succeeded"]
    given_back = [i for i in batch if jobs[i].state == "queued"]
    assert len(finished) + len(given_back) == len(batch)
    assert finished and given_back
    counts = side_effect_counts()
    for job_id in finished:
        assert jobs[job_id].attempt == 1
    for job_id in given_back:
        assert (jobs[job_id].attempt, jobs[job_id].worker_ids, jobs[job_id].errors) == (0, [], [])
    key_of = {j.id: j.args[0] for j in jobs.values()}
    assert all(counts[f"{key_of[i]}:end"] == 1 for i in finished)
    assert not any(f"{key_of[i]}:start" in counts for i in given_back)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_job_running_past_the_shutdown_timeout_goes_back_without_using_an_attempt(
    tmp_path: Path, signum: int
) -> None:
    with running_worker(tmp_path, "--concurrency", "1", "--shutdown-timeout", "0.5") as worker:
        # Warm up, so that the quick job and the hanging one come in one claim.
        basic.record.enqueue("warm-up")
        wait_until(lambda: side_effect_counts().get("warm-up"))
        with transaction.atomic():
            quick = resilience.record_first.enqueue("quick").id
            hanging = resilience.hang_on_first_attempt.enqueue("hanging").id
        wait_until(lambda: side_effect_counts().get("hanging:start"))

        worker.signal(signum)
        assert worker.wait() == 0

    assert "event=executor_killed" in worker.log()
    # The job that finished before the signal stays finished: its outcome was written
    # before the executor was killed, so it is not run again.
    assert job(quick).state == "succeeded"
    back = job(hanging)
    assert (back.state, back.attempt, back.worker_ids, back.errors) == ("queued", 0, [], [])
    assert side_effect_counts() == {"warm-up": 1, "quick": 1, "hanging:start": 1}


def test_given_back_job_keeps_the_attempts_it_had_used(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", "--shutdown-timeout", "0.3") as worker:
        retried = resilience.fail_once_then_hang.enqueue("retried").id
        wait_until(lambda: side_effect_counts().get("retried:2"))
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0

    back = job(retried)
    assert (back.state, back.attempt, len(back.worker_ids), len(back.errors)) == ("queued", 1, 1, 1)
    assert back.last_error == "first attempt fails"


def test_second_signal_exits_at_once(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "2", "--shutdown-timeout", "60") as worker:
        hanging = resilience.hang_on_first_attempt.enqueue("hanging").id
        wait_until(lambda: side_effect_counts().get("hanging:start"))
        executors = worker.executor_pids()

        worker.signal(signal.SIGTERM)
        worker.wait_for_log("event=shutdown_requested")
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=2) != 0
        wait_until(lambda: not any(is_alive(pid) for pid in executors), timeout=5)

    # Nothing was given back in a hurry: the lease brings the job back later.
    assert job(hanging).state == "running"
    assert all_in_state([hanging], "running")
