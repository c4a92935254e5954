"""Concurrency inside an executor: async handlers run many at once on its event loop, a
thread lane runs blocking I/O handlers side by side, and leases, limits, options and
shutdown hold there as in the inline lane (issue 7, point 15; point 12's soft limit
through .using() and the supervisor's settlement)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import F

from jobs.models import Job
from jobs.states import State
from tests.conftest import side_effect_counts
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import hostile, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def test_async_handlers_run_concurrently_on_one_executor(tmp_path: Path) -> None:
    ids = [r.id for r in hostile.async_sleep.enqueue_many([((f"a{n}", 1.0), {}) for n in range(100)])]
    with running_worker(tmp_path, "--concurrency", "1"):
        wait_until(lambda: Job.objects.filter(id__in=ids, state=State.SUCCEEDED).count() == 100, timeout=30)
    spans = []
    for value in Job.objects.filter(id__in=ids).values_list("result", flat=True):
        _, started, ended = value.split()
        spans.append((float(started), float(ended)))
    # The default --async-concurrency is 50 per executor.
    assert 40 <= most_at_once(spans) <= 50


def test_a_thread_lane_runs_blocking_handlers_side_by_side(tmp_path: Path) -> None:
    hostile.sleep_and_record.enqueue_many([((f"t{n}", 0.5), {}) for n in range(32)])
    with running_worker(tmp_path, "--concurrency", "1", "--threads", "8"):
        wait_until(lambda: len(side_effect_counts()) == 64, timeout=30)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM min(at) FILTER (WHERE key LIKE '%%:start')), "
            "extract(epoch FROM max(at) FILTER (WHERE key LIKE '%%:end')) FROM test_side_effects "
            "GROUP BY split_part(key, ':', 1)"
        )
        spans = [(float(a), float(b)) for a, b in cursor.fetchall()]
    assert most_at_once(spans) == 8


def test_an_async_handler_past_its_limits_is_cancelled_and_the_executor_lives(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        hard = hostile.async_overrun.enqueue("hard").id
        soft = hostile.async_soft_limited.enqueue("soft").id
        fine = [r.id for r in hostile.async_sleep.enqueue_many([((f"f{n}", 0.2), {}) for n in range(10)])]
        wait_until(lambda: {job(hard).state, job(soft).state} == {State.DEAD}, timeout=20)
        wait_until(lambda: Job.objects.filter(id__in=fine, state=State.SUCCEEDED).count() == 10, timeout=20)
        log = worker.log()
    assert job(hard).errors[0]["exception"] == "jobs.exceptions.TimeLimitExceeded"
    assert job(soft).errors[0]["exception"] == "jobs.exceptions.SoftTimeLimitExceeded"
    assert "event=executor_lost" not in log


def test_a_coroutine_that_blocks_its_loop_past_the_hard_limit_gets_its_process_killed(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        blocker = hostile.async_block_the_loop.using(timeout=1.0, max_attempts=1).enqueue(30.0).id
        wait_until(lambda: job(blocker).state == State.DEAD, timeout=20)
        assert "event=time_limit" in worker.log()
    assert job(blocker).errors[0]["exception"] == "jobs.exceptions.TimeLimitExceeded"


def test_a_soft_limit_reaches_a_handler_thread(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", "--threads", "2"):
        spinner = hostile.spin_in_thread.enqueue("thread").id
        wait_until(lambda: job(spinner).state == State.DEAD, timeout=20)
    assert job(spinner).errors[0]["exception"] == "jobs.exceptions.SoftTimeLimitExceeded"


def test_a_soft_limit_set_through_using_is_raised_in_the_handler(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1"):
        spinner = hostile.spin_forever.using(soft_timeout=0.3).enqueue("using").id
        wait_until(lambda: job(spinner).state == State.DEAD, timeout=20)
    assert job(spinner).errors[0]["exception"] == "jobs.exceptions.SoftTimeLimitExceeded"
    assert side_effect_counts() == {"using:soft": 1}


def test_a_dead_executors_job_is_retried_on_the_backoff_its_row_carries(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        retry = {"backoff_base": 1000.0, "backoff_cap": 2000.0, "jitter": False}
        pill = resilience.exit_abruptly.using(**retry).enqueue("pill").id
        wait_until(lambda: job(pill).errors, timeout=20)
        assert "event=executor_lost" in worker.log()
    waiting = job(pill)
    assert (waiting.state, waiting.attempt) == (State.SCHEDULED, 1)
    assert waiting.errors[0]["exception"] == "jobs.exceptions.ProcessDied"
    # Settled on the .using() backoff of its row (1000 s), not the worker's (0.1 s, cap 0.2).
    assert 1000 <= (waiting.run_at - waiting.last_attempted_at).total_seconds() <= 1010


def test_sigterm_lets_async_and_thread_handlers_finish(tmp_path: Path) -> None:
    async_ids = [r.id for r in hostile.async_sleep.enqueue_many([((f"s{n}", 1.5), {}) for n in range(20)])]
    with running_worker(tmp_path, "--concurrency", "1", "--threads", "2") as worker:
        blocking = hostile.sleep_and_record.enqueue("blocking", 1.5).id
        # Started, not merely claimed: a claimed row is 'running' before its handler begins.
        started = Job.objects.filter(state=State.RUNNING, started_attempt=F("attempt"))
        wait_until(lambda: started.count() >= 10, timeout=20)
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0
    assert Job.objects.filter(id__in=[*async_ids, blocking], state=State.RUNNING).count() == 0
    finished = Job.objects.filter(id__in=[*async_ids, blocking], state=State.SUCCEEDED).count()
    queued = Job.objects.filter(id__in=[*async_ids, blocking], state=State.QUEUED, attempt=0).count()
    # What ran finished; what had not started went back unused.
    assert finished >= 10 and finished + queued == 21
