"""The prefetch policy is pure: how much an executor claims ahead and for which lane,
decided from the rows its lanes hold and the run times it has seen, with no thread,
lock or database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from jobs.store import Claimed
from jobs.worker.lane_rows import ASYNC, INLINE, THREADS, LaneRows
from jobs.worker.prefetch import EWMA, Prefetch

NOW = 1000.0


def row(queue: str = "default", task: str = "tasks.noop", **extra: Any) -> Claimed:
    values: dict[str, Any] = {
        "id": uuid.uuid4(), "task_path": task, "args": "[]", "kwargs": "{}", "attempt": 1,
        "max_attempts": 3, "timeout": None, "lease_seconds": 300.0, "trace_id": "t",
        "queue_name": queue, "priority": 0, "run_at": datetime(2026, 1, 1, tzinfo=UTC), "expired": False,
        "handbacks": 0, "soft_timeout": None, "jitter": None, "backoff_base": None, "backoff_cap": None,
        "non_retryable": [], "created_at": datetime(2026, 1, 1, tzinfo=UTC),
    }  # fmt: skip
    values.update(extra)
    return Claimed(**values)


def inline(*, running: list[tuple[Claimed, float]] = (), waiting: list[Claimed] = ()) -> LaneRows:  # type: ignore[assignment]
    lane = LaneRows(INLINE, entries=[0])
    lane.running = {entry: item for entry, item in enumerate(running)}
    lane.waiting.extend(waiting)
    return lane


def test_an_idle_inline_lane_may_take_a_job_even_with_no_horizon() -> None:
    assert Prefetch(0.0, [INLINE]).budget({INLINE: inline()}, NOW) == {INLINE: pytest.approx(1e-9)}
    assert Prefetch(0.5, [INLINE]).budget({INLINE: inline()}, NOW) == {INLINE: 0.5}


def test_the_inline_budget_is_topped_up_to_the_horizon_only_once_half_is_used() -> None:
    policy = Prefetch(1.0, [INLINE])
    policy.expected["default"] = 0.2
    # 0.6 s of work ahead: more than half the horizon, nothing more is claimed.
    ahead = inline(running=[(row(), NOW)], waiting=[row(), row()])
    assert policy.budget({INLINE: ahead}, NOW) == {}
    # 0.4 s ahead: topped up to the horizon.
    ahead = inline(running=[(row(), NOW)], waiting=[row()])
    assert policy.budget({INLINE: ahead}, NOW) == {INLINE: pytest.approx(0.6)}
    # A running job counts only for what it has left of its expected time.
    ahead = inline(running=[(row(), NOW - 0.15)], waiting=[row(), row()])
    assert policy.budget({INLINE: ahead}, NOW) == {INLINE: pytest.approx(1.0 - 0.45)}


def test_an_unmeasured_queue_counts_as_a_whole_horizon() -> None:
    policy = Prefetch(1.0, [INLINE])
    assert policy.expected_time("new") == 1.0
    assert policy.budget({INLINE: inline(running=[(row("new"), NOW)])}, NOW) == {}


def test_a_lane_whose_every_handler_outlived_the_horizon_is_stuck_and_gets_nothing() -> None:
    policy = Prefetch(1.0, [INLINE, THREADS])
    threads = LaneRows(THREADS, entries=[0, 1])
    threads.running = {0: (row(), NOW - 2), 1: (row(), NOW - 0.5)}
    assert not policy.stuck(threads, NOW)
    threads.running[1] = (row(), NOW - 1.5)
    assert policy.stuck(threads, NOW)
    assert policy.stuck(inline(running=[(row(), NOW - 2)]), NOW)
    assert policy.budget({INLINE: inline(running=[(row(), NOW - 2)])}, NOW) == {}


def test_thread_and_async_lanes_are_budgeted_in_free_slots() -> None:
    policy = Prefetch(1.0, [THREADS, ASYNC])
    threads = LaneRows(THREADS, entries=[0, 1, 2, 3])
    threads.running = {0: (row(), NOW)}
    threads.waiting.append(row())
    loop = LaneRows(ASYNC, entries=[4, 5])
    loop.running = {4: (row(), NOW), 5: (row(), NOW)}
    assert policy.budget({THREADS: threads, ASYNC: loop}, NOW) == {THREADS: 2.0}


def test_spend_takes_slots_from_other_lanes_and_expected_seconds_from_the_inline_one() -> None:
    policy = Prefetch(1.0, [INLINE, THREADS])
    policy.learn(row("io", "tasks.fetch"), THREADS)
    policy.learn(row("cpu", "tasks.crunch"), INLINE)
    policy.expected["cpu"] = 0.4
    budget = policy.claim_budget({INLINE: 1.0, THREADS: 2.0})
    assert [budget.spend("io") for _ in range(3)] == [1, 1, 0]
    # A job may overrun what is left: three of 0.4 s fit a budget of 1 s.
    assert [budget.spend("cpu") for _ in range(4)] == [1, 1, 1, 0]


@pytest.mark.parametrize(
    ("expected", "left", "at_most"), [(0.4, 1.0, 10), (0.001, 0.005, 1000), (0.3, 0.9, 2)]
)
def test_spending_many_at_once_takes_what_spending_one_by_one_would(
    expected: float, left: float, at_most: int
) -> None:
    policy = Prefetch(1.0, [INLINE, THREADS])
    policy.learn(row("cpu", "tasks.crunch"), INLINE)
    policy.learn(row("io", "tasks.fetch"), THREADS)
    policy.expected["cpu"] = expected
    one_by_one = policy.claim_budget({INLINE: left, THREADS: 3.0})
    singly = 0
    while singly < at_most and one_by_one.spend("cpu"):
        singly += 1
    at_once = policy.claim_budget({INLINE: left, THREADS: 3.0})
    assert at_once.spend("cpu", at_most) == singly
    assert at_once.left[INLINE] == pytest.approx(one_by_one.left[INLINE])
    assert at_once.spend("io", 10) == 3 and at_once.spend("io") == 0


def test_an_unmeasured_inline_queue_gets_one_job_per_claim() -> None:
    policy = Prefetch(1.0, [INLINE])
    budget = policy.claim_budget({INLINE: 1.0})
    assert [budget.spend("new", 5) for _ in range(3)] == [1, 0, 0]
    assert budget.spend("other") == 1


def test_unknown_tasks_and_queues_go_where_a_blocking_task_would() -> None:
    assert Prefetch(1.0, [INLINE, ASYNC]).lane_for_task("tasks.unknown") == INLINE
    assert Prefetch(1.0, [INLINE, THREADS, ASYNC]).lane_for_task("tasks.unknown") == THREADS
    assert Prefetch(1.0, [INLINE, THREADS, ASYNC]).lane_for_queue("unknown") == THREADS
    policy = Prefetch(1.0, [INLINE, ASYNC])
    policy.learn(row("aio", "tasks.ping"), ASYNC)
    assert (policy.lane_for_task("tasks.ping"), policy.lane_for_queue("aio")) == (ASYNC, ASYNC)
    # A lane this executor does not have is no answer.
    policy.learn(row("io", "tasks.fetch"), THREADS)
    assert (policy.lane_for_task("tasks.fetch"), policy.lane_for_queue("io")) == (INLINE, INLINE)


def test_run_times_are_running_averages_and_a_tasks_first_run_pays_for_its_import() -> None:
    policy = Prefetch(1.0, [INLINE, THREADS])
    first = row("default", "tasks.work")
    policy.finished(first, INLINE, 5.0)
    assert policy.task_time["tasks.work"] == 0.5
    assert "default" not in policy.expected
    assert not policy.slow("tasks.work")
    policy.finished(first, INLINE, 3.0)
    assert policy.task_time["tasks.work"] == pytest.approx(0.5 + EWMA * 2.5)
    assert policy.expected["default"] == 3.0
    assert not policy.slow("tasks.work")
    policy.finished(first, INLINE, 2.0)
    assert policy.expected["default"] == pytest.approx(3.0 + EWMA * -1.0)
    # Past the horizon (1 s): what waits behind its next job is given back.
    assert policy.slow("tasks.work")
    # Only inline jobs measure a queue's expected time (the budget of the inline lane).
    policy.finished(row("io", "tasks.fetch"), THREADS, 1.0)
    policy.finished(row("io", "tasks.fetch"), THREADS, 1.0)
    assert "io" not in policy.expected
