"""Every option works through @task and through .using(), the same way on every path that
decides an outcome: the executor (here through the real attempt code), the reaper (its SQL
on the row), and the supervisor's settlement of a dead executor (tests/process/
test_lanes.py and test_crash_loops.py run those in real workers) (issue 7, point 12)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs import store
from jobs.models import Job
from jobs.states import State
from tests.support import factories
from tests.tasks import engine

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) + timedelta(days=1)


def run(result: Any) -> Job:
    factories.run_due(now=T0)
    return Job.objects.get(id=result.id)


@pytest.mark.parametrize(
    ("options", "attempt_delay"),
    [
        ({"backoff_base": 1000.0, "jitter": False}, 1000.0),
        ({"backoff_base": 100.0, "backoff_cap": 30.0, "jitter": False}, 30.0),
    ],
)
def test_backoff_options_through_using_set_the_retry_delay(
    options: dict[str, Any], attempt_delay: float
) -> None:
    job = run(engine.fail_plain.using(**options).enqueue())
    assert (job.state, job.attempt) == (State.SCHEDULED, 1)
    assert job.run_at == T0 + timedelta(seconds=attempt_delay)


def test_jitter_through_using_spreads_retries_within_the_equal_jitter_band() -> None:
    results = [engine.fail_plain.using(backoff_base=1000.0, jitter=True).enqueue() for _ in range(20)]
    factories.run_due(now=T0)
    delays = {(Job.objects.get(id=r.id).run_at - T0).total_seconds() for r in results}
    assert all(500 <= d <= 1000 for d in delays) and len(delays) > 10


@pytest.mark.parametrize("entry", [RuntimeError, "builtins.RuntimeError"])
def test_non_retryable_through_using_ends_the_job_dead_at_once(entry: Any) -> None:
    job = run(engine.fail_plain.using(non_retryable=(entry,), max_attempts=5).enqueue())
    assert (job.state, job.attempt, job.last_error) == (State.DEAD, 1, "plain failure")


def test_options_are_kept_on_the_row_for_every_path() -> None:
    result = engine.fail_plain.using(
        backoff_base=7.0,
        backoff_cap=70.0,
        jitter=False,
        soft_timeout=2.5,
        timeout=5.0,
        non_retryable=(KeyError,),
    ).enqueue()
    job = Job.objects.get(id=result.id)
    assert (job.backoff_base, job.backoff_cap, job.jitter, job.soft_timeout, job.timeout) == (
        7.0,
        70.0,
        False,
        2.5,
        5.0,
    )
    assert job.non_retryable == ["builtins.KeyError"]
    bulk = engine.fail_plain.using(jitter=False, non_retryable=(KeyError,)).enqueue_many([((), {})] * 60)
    rows = Job.objects.filter(id__in=[r.id for r in bulk]).values_list("jitter", "non_retryable")
    assert [tuple(row) for row in rows] == [(False, ["builtins.KeyError"])] * 60


def test_the_reaper_retries_a_lost_job_on_the_backoff_and_jitter_of_its_row() -> None:
    result = engine.fail_plain.using(backoff_base=1000.0, jitter=False, max_attempts=3).enqueue()
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        [row] = store.claim(cursor, worker=token, queues=["default"], limit=1, now=T0)
        store.record_outcomes(cursor, worker=token, outcomes=[], started=[(row.id, row.attempt)])
        lost_at = T0 + timedelta(seconds=400)
        # The worker's own backoff (base 1 s) is not the job's; its cap is high enough.
        [reaped] = store.reap(cursor, backoff_base=1.0, backoff_cap=5000.0, now=lost_at)
    assert (reaped.state, reaped.unstarted) == ("scheduled", False)
    assert Job.objects.get(id=result.id).run_at == lost_at + timedelta(seconds=1000)
