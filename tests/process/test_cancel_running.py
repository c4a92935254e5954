"""A running attempt holds what it holds until it ends (invariant 13), with real workers:
a cancelled running job keeps its concurrency slot, and its workflow step, until its handler
returns; an async handler sees the cancel too, and its job is counted as it ended;
compensations run in reverse order of their steps' completion; chords fanning in on two
executors never deadlock on their workflow rows."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from jobs import limits, store
from jobs.models import Job
from jobs.states import State
from jobs.workflows import Workflow, chain, chord, group, step
from tests.conftest import side_effect_counts
from tests.process.test_limits import events, most_running, spans_of
from tests.process.test_observability import finished, scrape
from tests.support.mail import free_port
from tests.support.workers import running_worker, start_marked, wait_until
from tests.tasks import limited
from tests.tasks import progress as progress_tasks
from tests.tasks import workflows as t

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


@pytest.fixture(autouse=True)
def fresh_limits() -> Iterator[None]:
    # The limits are registered in the database by the first enqueue of this process; each
    # test starts from an empty database.
    limits.registry.forget()
    yield
    limits.registry.forget()


def keys_in_order() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM test_side_effects ORDER BY id")
        return [key for (key,) in cursor.fetchall()]


def slot_in_use(limit_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(running), 0) FROM jobs_limit_state WHERE limit_name = %s", [limit_name]
        )
        return int(cursor.fetchone()[0])


def test_a_cancelled_running_job_keeps_its_concurrency_slot_until_its_handler_ends(tmp_path: Path) -> None:
    first = limited.one_at_a_time.using(max_attempts=3).enqueue("c0", 2.0, True)
    others = [limited.one_at_a_time.enqueue(f"c{n}", 0.2) for n in (1, 2)]
    with running_worker(tmp_path, "--concurrency", "3"):
        wait_until(lambda: start_marked(first.id), timeout=20, message="the first job to start")
        limit_name = Job.objects.get(id=first.id).limit_name
        store.cancel(first.id)
        # While its handler works on, the job is running, its slot in use, nothing else started.
        while not any(key == "c0:end" for key, _ in events("c0")):
            row = Job.objects.get(id=first.id)
            ended = any(key == "c0:end" for key, _ in events("c0"))
            if not ended and row.state == State.RUNNING:
                assert row.cancel_requested_at is not None
                assert slot_in_use(limit_name) == 1
                # Nothing started after it (a job that ran and ended before it is fine: the
                # claim order of equal jobs under a limit is not part of this test).
                starts = [key for key, _ in events() if key.endswith(":start")]
                assert starts[-1] == "c0:start", starts
            time.sleep(0.1)
        wait_until(
            lambda: Job.objects.filter(id__in=[o.id for o in others], state=State.SUCCEEDED).count() == 2,
            timeout=30,
            message="the other jobs to run",
        )
    spans = spans_of(events())
    assert len(spans) == 3 and most_running(spans) == 1
    ended = Job.objects.get(id=first.id)
    # Its failure after the cancel is not retried: the job ends cancelled.
    assert (ended.state, ended.attempt, ended.cancel_requested_at) == (State.CANCELLED, 1, None)


def test_an_async_handler_sees_a_cancel_and_its_job_is_counted_cancelled(tmp_path: Path) -> None:
    job = progress_tasks.await_cancel.enqueue("async")
    port = free_port()
    with running_worker(tmp_path, "--concurrency", "1", "--metrics-port", str(port)) as worker:
        wait_until(lambda: start_marked(job.id), timeout=20, message="the coroutine to start")
        store.cancel(job.id)
        # Its next check (within a second of asking) raises JobCancelled on the event loop.
        wait_until(lambda: side_effect_counts().get("async:stopped") == 1, timeout=15)
        wait_until(lambda: Job.objects.get(id=job.id).state == State.CANCELLED, timeout=15)

        def counted() -> Counter[tuple[str, str]] | None:
            counts = finished(scrape(port))
            return counts if counts[("await_cancel", "cancelled")] else None

        counts = wait_until(counted, timeout=15, message="the cancel in /metrics")
        lines = worker.wait_for_log(rf"job={job.id} .*outcome=cancelled")
    ended = Job.objects.get(id=job.id)
    # Stopped early (well before its 30 s), in its first attempt, never retried.
    assert (ended.state, ended.attempt, ended.result) == (State.CANCELLED, 1, None)
    assert counts[("await_cancel", "cancelled")] == 1
    assert counts[("await_cancel", "retried")] == 0
    assert "JobCancelled" in lines[0]


def test_a_cancelled_running_step_is_compensated_after_its_handler_ends(tmp_path: Path) -> None:
    flow = chain(
        step(t.first_effect, "a", compensate=step(t.undo, "a")),
        step(t.slow_effect, key="b", seconds=2.0, compensate=step(t.undo, "b")),
        step(t.effect, "c"),
    )
    with running_worker(tmp_path, "--concurrency", "2"):
        run = flow.enqueue()
        wait_until(lambda: "b:start" in keys_in_order(), timeout=20, message="the slow step to start")
        slow = Job.objects.get(task_path__endswith=".slow_effect")
        store.cancel(slow.id)
        wait_until(lambda: Workflow(run.id).finished, timeout=30, message="the workflow to finish")
    run.refresh()
    assert run.status == "failed" and "cancel" in run.error
    # Nothing was undone while the step still worked; then its own side effect first.
    assert keys_in_order() == ["a", "b:start", "b:end", "undo:b", "undo:a"]
    assert Job.objects.get(id=slow.id).state == State.SUCCEEDED


def test_compensations_run_in_reverse_order_of_completion_when_a_group_member_outlives_its_failure(
    tmp_path: Path,
) -> None:
    runs = [
        chain(
            step(t.first_effect, f"a{n}", compensate=step(t.undo, f"a{n}")),
            group(
                step(t.fail_after, seconds=0.3),
                step(t.slow_effect, key=f"b{n}", seconds=0.6, compensate=step(t.undo, f"b{n}")),
            ),
        )
        for n in range(20)
    ]
    with running_worker(tmp_path, "--concurrency", "8"):
        started = [flow.enqueue() for flow in runs]
        wait_until(
            lambda: all(Workflow(run.id).finished for run in started), timeout=120, message="every workflow"
        )
    order = keys_in_order()
    # Members the fast failure cancelled before they started did nothing to undo.
    outlived = [n for n in range(20) if f"b{n}:end" in order]
    assert len(outlived) >= 10, order
    assert all(f"undo:b{n}" not in order for n in range(20) if n not in outlived)
    out_of_order = [n for n in outlived if order.index(f"undo:b{n}") > order.index(f"undo:a{n}")]
    assert out_of_order == []
    # And nothing was undone before the step it undoes had ended.
    assert all(order.index(f"undo:a{n}") > order.index(f"b{n}:end") for n in outlived)
    assert {Workflow(run.id).status for run in started} == {"failed"}


def deadlocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_chords_fanning_in_on_two_executors_never_deadlock(tmp_path: Path) -> None:
    flows = [
        chord(group(*(step(t.add, n, m) for m in range(10))), step(t.collect, f"c{n}")) for n in range(200)
    ]
    before = deadlocks()
    with running_worker(tmp_path, "--concurrency", "2") as worker:
        started = [flow.enqueue() for flow in flows]
        wait_until(
            lambda: Job.objects.filter(task_path__endswith=".collect", state=State.SUCCEEDED).count() == 200,
            timeout=240,
            message="every chord's callback",
        )
        log = worker.log()
    assert "40P01" not in log and "deadlock" not in log.lower()
    assert deadlocks() == before
    assert {Workflow(run.id).status for run in started} == {"succeeded"}
