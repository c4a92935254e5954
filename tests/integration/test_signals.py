"""django.tasks' signals: sent on enqueue, start and finish when someone listens, with the
TaskResult the row has."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.tasks import TaskResultStatus
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from jobs.backend import PostgresBackend
from tests.support import factories
from tests.tasks import basic

pytestmark = pytest.mark.django_db


def _recorder(events: list[tuple[str, Any, Any]], name: str) -> Any:
    def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
        events.append((name, task_result, sender))

    return receive


@pytest.fixture
def heard() -> Iterator[list[tuple[str, Any, Any]]]:
    events: list[tuple[str, Any, Any]] = []
    signals = {"enqueued": task_enqueued, "started": task_started, "finished": task_finished}
    receivers = {name: _recorder(events, name) for name in signals}
    for name, signal in signals.items():
        signal.connect(receivers[name])
    yield events
    for name, signal in signals.items():
        signal.disconnect(receivers[name])


def test_enqueue_start_and_finish_are_announced(heard: list[tuple[str, Any, Any]]) -> None:
    result = basic.add.enqueue(20, 22)
    factories.run_due(now=timezone.now())
    assert [(name, r.id, sender) for name, r, sender in heard] == [
        ("enqueued", result.id, PostgresBackend),
        ("started", result.id, PostgresBackend),
        ("finished", result.id, PostgresBackend),
    ]
    started, finished = heard[1][1], heard[2][1]
    assert started.status == TaskResultStatus.RUNNING and started.attempts == 1
    assert finished.status == TaskResultStatus.SUCCESSFUL and finished.return_value == 42


def test_a_retried_attempt_is_not_a_finished_task(heard: list[tuple[str, Any, Any]]) -> None:
    result = basic.fail_value_error.enqueue()
    retried = basic.fail_always.enqueue("again")
    factories.run_due(now=timezone.now())
    finished = [(r.id, r.status) for name, r, _ in heard if name == "finished"]
    # fail_value_error is not retryable: dead at once; fail_always will be retried.
    assert finished == [(result.id, TaskResultStatus.FAILED)]
    [failed] = [r for name, r, _ in heard if name == "finished"]
    assert failed.errors[-1].exception_class is ValueError
    assert retried.id in {r.id for name, r, _ in heard if name == "started"}


def test_a_deduplicated_enqueue_announces_nothing_new(heard: list[tuple[str, Any, Any]]) -> None:
    keyed = basic.add.using(dedupe_key="once")
    keyed.enqueue(1, 2)
    keyed.enqueue(1, 2)
    assert [name for name, _, _ in heard] == ["enqueued"]


def test_started_and_finished_carry_the_times_the_row_keeps(heard: list[tuple[str, Any, Any]]) -> None:
    result = basic.add.enqueue(1, 2)
    at = timezone.now()
    factories.run_due(now=at)
    [started] = [r for name, r, _ in heard if name == "started"]
    [finished] = [r for name, r, _ in heard if name == "finished"]
    done = basic.add.get_result(result.id)
    assert (started.started_at, started.last_attempted_at) == (at, at)
    assert (finished.started_at, finished.last_attempted_at) == (done.started_at, done.last_attempted_at)
    assert started.enqueued_at == finished.enqueued_at == result.enqueued_at == done.enqueued_at


def test_a_later_attempt_keeps_the_first_start(heard: list[tuple[str, Any, Any]]) -> None:
    result = basic.report_attempt.enqueue(fail_until=1)
    first = timezone.now()
    factories.run_due(now=first)
    second = first + timedelta(hours=1)
    factories.run_due(now=second)
    started = [r for name, r, _ in heard if name == "started"]
    [finished] = [r for name, r, _ in heard if name == "finished"]
    assert [(r.started_at, r.last_attempted_at, r.attempts) for r in started] == [
        (first, first, 1),
        (first, second, 2),
    ]
    assert (finished.started_at, finished.last_attempted_at, finished.return_value) == (first, second, 2)
    done = basic.report_attempt.get_result(result.id)
    assert (done.started_at, done.last_attempted_at) == (first, second)


def test_a_receiver_of_task_finished_alone_gets_the_runs_times() -> None:
    # Nothing needed the running TaskResult when the job started: it is made at the end,
    # with the same times, for a success and for a job that is dead.
    events: list[tuple[str, Any, Any]] = []
    receiver = _recorder(events, "finished")
    task_finished.connect(receiver)
    try:
        ok = basic.add.enqueue(1, 2)
        bad = basic.fail_value_error.enqueue()
        at = timezone.now()
        factories.run_due(now=at)
    finally:
        task_finished.disconnect(receiver)
    by_id = {r.id: r for _, r, _ in events}
    assert by_id[ok.id].status == TaskResultStatus.SUCCESSFUL
    assert by_id[bad.id].status == TaskResultStatus.FAILED
    assert {(r.started_at, r.last_attempted_at) for r in by_id.values()} == {(at, at)}
