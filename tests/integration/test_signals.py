"""django.tasks' signals: sent on enqueue, start and finish when someone listens."""

from __future__ import annotations

from collections.abc import Iterator
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
