"""Fairness with real workers: rows an executor claimed but has not started never wait
behind a slow or hung handler, weighted queues keep their weights whatever their jobs
cost, and jobs of equal priority start in the order they were enqueued (issue 7, point 1)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection, transaction

from jobs.models import Job
from jobs.states import State
from tests.conftest import side_effect_counts
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import basic, hostile

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def _succeeded(prefix: str) -> int:
    return Job.objects.filter(state=State.SUCCEEDED, args__0__startswith=prefix).count()


def test_quick_jobs_never_wait_behind_a_slow_one_in_the_same_batch(tmp_path: Path) -> None:
    before = basic.record.enqueue_many([((f"quick-{n}",), {}) for n in range(2000)])
    slow = hostile.sleep_and_record.enqueue("slow", 8.0).id
    after = basic.record.enqueue_many([((f"quick-late-{n}",), {}) for n in range(600)])
    with running_worker(tmp_path, "--concurrency", "2"):
        wait_until(
            lambda: side_effect_counts().get("slow:start"), timeout=20, message="the slow job to start"
        )
        # Everything else finishes on the other executor while the slow one still runs:
        # nothing it had claimed stays leased behind it.
        wait_until(lambda: _succeeded("quick") == 2600, timeout=7, message="all quick jobs")
        assert job(slow).state == State.RUNNING
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM jobs_job WHERE state = 'running' AND worker_id = %s",
                [job(slow).worker_id],
            )
            assert cursor.fetchone()[0] == 1
        wait_until(lambda: job(slow).state == State.SUCCEEDED, timeout=15)
    assert {r.id for r in [*before, *after]} <= set(
        str(i) for i in Job.objects.filter(state=State.SUCCEEDED).values_list("id", flat=True)
    )
    assert all(count == 1 for count in side_effect_counts().values())


def test_weighted_queues_keep_their_weights_when_their_jobs_cost_differently(tmp_path: Path) -> None:
    # email jobs take 20 ms, low ones 1 ms; both queues stay full for the whole run.
    basic.sleep_then_record.using(queue_name="email").enqueue_many(
        [((f"email-{n}", 0.02), {}) for n in range(6000)]
    )
    basic.sleep_then_record.using(queue_name="low").enqueue_many(
        [((f"low-{n}", 0.001), {}) for n in range(6000)]
    )
    with running_worker(tmp_path, "--queues", "email:6,low:1", "--concurrency", "2") as worker:
        wait_until(lambda: side_effect_counts(), timeout=15, message="the first job")
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            started = cursor.fetchone()[0]
        time.sleep(30)
        worker.signal(signal.SIGTERM)
        worker.wait(timeout=30)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT split_part(key, '-', 1), count(*) FROM test_side_effects "
            "WHERE at >= %s AND at < %s + interval '30 seconds' GROUP BY 1",
            [started, started],
        )
        per_queue = dict(cursor.fetchall())
    assert per_queue["email"] > 500, per_queue
    ratio = per_queue["email"] / per_queue["low"]
    assert 6 * 0.8 <= ratio <= 6 * 1.2, per_queue


def test_jobs_of_equal_priority_start_in_the_order_they_were_enqueued(tmp_path: Path) -> None:
    with transaction.atomic():
        # One transaction: one due time for all; the order is the ids'.
        basic.record.enqueue_many([((f"{n:04}",), {}) for n in range(300)])
        for n in range(300, 320):
            basic.record.enqueue(f"{n:04}")
    with running_worker(tmp_path, "--concurrency", "1"):
        wait_until(lambda: len(side_effect_counts()) == 320, timeout=20)
    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM test_side_effects ORDER BY id")
        order = [key for (key,) in cursor.fetchall()]
    assert order == sorted(order)
    assert Counter(order).most_common(1)[0][1] == 1
