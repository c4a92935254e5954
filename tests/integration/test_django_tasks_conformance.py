"""Code written against django.tasks behaves on our backend as Django documents it: what
Django's own backends raise and record, we raise and record (our types subclass theirs); a
result equals what get_result() and refresh() read back; Django's log lines follow the
``django.tasks`` logger. The behaviours of Django's generic tests/tasks/ cases, with "run
now" replaced by enqueue and a worker run (factories.run_due: the worker's attempt code)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.tasks import TaskResultStatus, task_backends
from django.tasks import signals as django_signals
from django.tasks.exceptions import InvalidTask
from django.test import override_settings
from django.utils import timezone

from jobs import signals, store
from jobs.backend import PostgresBackend
from jobs.exceptions import BadReturnValue, InvalidPayload
from jobs.models import Job
from tests.support import factories
from tests.tasks import basic

pytestmark = pytest.mark.django_db


def test_an_unknown_queue_is_refused_with_djangos_message() -> None:
    with pytest.raises(InvalidTask, match=r"^Queue 'nowhere' is not valid for backend\."):
        basic.add.using(queue_name="nowhere")


def test_enqueue_validates_a_task_made_for_another_backend() -> None:
    # Built without validation (as a task made under other settings would be): the backend
    # still refuses a queue it has no worker for, and stores nothing.
    task = basic.add
    stray = object.__new__(type(task))
    for name in task.__dataclass_fields__:
        object.__setattr__(stray, name, getattr(task, name))
    object.__setattr__(stray, "queue_name", "nowhere")
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid for backend"):
        task_backends["default"].enqueue(stray, (1, 2), {})
    assert not Job.objects.exists()


def test_arguments_that_are_not_json_raise_a_type_error() -> None:
    with pytest.raises(TypeError) as caught:
        basic.add.enqueue(object(), 2)
    assert isinstance(caught.value, InvalidPayload)
    assert not Job.objects.exists()


def test_a_return_value_that_is_not_json_is_a_type_error() -> None:
    assert issubclass(BadReturnValue, TypeError)


def test_a_result_keeps_its_task_through_get_result() -> None:
    result = basic.add.using(priority=5, queue_name="email").enqueue(1, 2)
    again = task_backends["default"].get_result(result.id)
    assert (again.task.priority, again.task.queue_name, again.task.func) == (5, "email", basic.add.func)
    factories.run_due(now=timezone.now(), queues=("email",))
    assert basic.add.get_result(result.id).return_value == 3


def test_using_with_no_change_is_a_new_equal_task() -> None:
    assert basic.add.using() == basic.add
    assert basic.add.using() is not basic.add
    assert replace(basic.add) == basic.add


# --- results read back ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{}, {"priority": 5, "queue_name": "email"}, {"run_after": "later"}, {"run_after": "earlier"}],
    ids=["plain", "priority and queue", "run_after ahead", "run_after passed"],
)
def test_a_result_equals_its_own_get_result_and_refresh_changes_nothing(options: dict[str, Any]) -> None:
    if "run_after" in options:
        shift = timedelta(minutes=10) if options["run_after"] == "later" else -timedelta(minutes=10)
        options = {"run_after": timezone.now() + shift}
    task = basic.add.using(**options)
    result = task.enqueue(1, 2)
    assert task_backends["default"].get_result(result.id) == result
    assert basic.add.get_result(result.id) == result
    assert result.task == task
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before


def test_a_deduplicated_enqueue_reads_back_as_the_job_it_found() -> None:
    keyed = basic.add.using(dedupe_key="once")
    keyed.enqueue(1, 2)
    again = keyed.enqueue(1, 2)
    assert replace(task_backends["default"].get_result(again.id), deduplicated=True) == again


@pytest.mark.parametrize("size", [3, store.COPY_THRESHOLD], ids=["one INSERT", "COPY per kind of row"])
def test_bulk_results_equal_their_get_result(size: int) -> None:
    # Due and delayed rows, in the caller's transaction: a COPY of each kind (each its own
    # statement time) once the batch is large enough.
    later = basic.add.using(run_after=timezone.now() + timedelta(hours=1))
    backend: PostgresBackend = task_backends["default"]
    results = backend.bulk_enqueue([(basic.add if i % 2 else later, [i, i], {}) for i in range(2 * size)])
    assert [backend.get_result(r.id) for r in results] == results


@pytest.mark.django_db(transaction=True)
def test_a_batch_copied_as_it_is_made_reads_back_equal() -> None:
    results = basic.add.enqueue_many(([i, i], {}) for i in range(store.COPY_THRESHOLD * 2))
    assert [basic.add.get_result(r.id) for r in results] == results
    assert len({r.enqueued_at for r in results}) == 1


def test_a_task_sent_to_our_backend_by_using_reads_back_equal() -> None:
    ours = {"BACKEND": "jobs.backend.PostgresBackend", "QUEUES": ["default", "email"]}
    immediate = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
    with override_settings(TASKS={"default": immediate, "jobs": ours}):
        task = basic.add.using(backend="jobs", queue_name="email", run_after=timezone.now())
        result = task.enqueue(2, 3)
        assert task_backends["jobs"].get_result(result.id) == result
        assert result.task.backend == "jobs"


def test_run_after_is_read_back_until_the_job_starts() -> None:
    # The row keeps the enqueued run_after as its due time only until the first start
    # (docs/reference/python.md, "Where the backend differs from Django's own").
    due = timezone.now() - timedelta(seconds=30)
    result = basic.add.using(run_after=due).enqueue(1, 2)
    assert basic.add.get_result(result.id).task.run_after == due
    factories.run_due(now=timezone.now())
    done = basic.add.get_result(result.id)
    assert (done.status, done.task.run_after) == (TaskResultStatus.SUCCESSFUL, None)
    assert done.started_at >= done.enqueued_at and done.finished_at >= done.started_at


def test_a_finished_result_reads_back_its_times_and_value() -> None:
    result = basic.add.enqueue(20, 22)
    factories.run_due(now=timezone.now())
    result.refresh()
    assert (result.status, result.is_finished, result.return_value, result.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        True,
        42,
        1,
    )
    assert result.enqueued_at <= result.started_at == result.last_attempted_at <= result.finished_at
    assert result == basic.add.get_result(result.id)


# --- Django's log lines ---------------------------------------------------------------------

DJANGOS_OWN = {
    id(django_signals.log_task_enqueued),
    id(django_signals.log_task_started),
    id(django_signals.log_task_finished),
}


@pytest.fixture
def only_djangos_receivers() -> Iterator[None]:
    """Django's logging receivers alone on the task signals (a module of test tasks may
    have connected its own), as in a project that connects none."""
    kept = {}
    for signal in (django_signals.task_enqueued, django_signals.task_started, django_signals.task_finished):
        kept[signal] = signal.receivers
        signal.receivers = [entry for entry in signal.receivers if entry[0][0] in DJANGOS_OWN]
        signal.sender_receivers_cache.clear()
    try:
        yield
    finally:
        for signal, receivers in kept.items():
            signal.receivers = receivers
            signal.sender_receivers_cache.clear()


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "django.tasks"]


def test_djangos_lines_appear_when_its_logger_is_on_whatever_else_listens(
    only_djangos_receivers: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        ok = basic.add.enqueue(1, 2)
        bad = basic.fail_value_error.enqueue()
        factories.run_due(now=timezone.now())
    seen = lines(caplog)
    add, fail = "tests.tasks.basic.add", "tests.tasks.basic.fail_value_error"
    assert seen == [
        (logging.DEBUG, f"Task id={ok.id} path={add} enqueued backend=default"),
        (logging.DEBUG, f"Task id={bad.id} path={fail} enqueued backend=default"),
        (logging.INFO, f"Task id={ok.id} path={add} state=RUNNING"),
        (logging.INFO, f"Task id={ok.id} path={add} state=SUCCESSFUL"),
        (logging.INFO, f"Task id={bad.id} path={fail} state=RUNNING"),
        (logging.ERROR, f"Task id={bad.id} path={fail} state=FAILED"),
    ]
    assert not any("NoneType" in message for _, message in seen)


def test_at_error_only_a_failed_task_is_logged_with_its_exception(
    only_djangos_receivers: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="django.tasks"):
        basic.add.enqueue(1, 2)
        bad = basic.fail_value_error.enqueue()
        factories.run_due(now=timezone.now())
    failed = f"Task id={bad.id} path=tests.tasks.basic.fail_value_error state=FAILED"
    assert lines(caplog) == [(logging.ERROR, failed)]
    [record] = [r for r in caplog.records if r.name == "django.tasks"]
    assert record.exc_info is not None and record.exc_info[0] is ValueError


def test_with_the_logger_quiet_and_no_receiver_nothing_is_sent(
    only_djangos_receivers: None, caplog: pytest.LogCaptureFixture
) -> None:
    # The worker's fast path: no TaskResult is made for signals that would reach no one.
    with caplog.at_level(logging.WARNING, logger="django.tasks"):
        assert not signals.wanted(django_signals.task_started, signals.STARTED)
        assert not signals.wanted(django_signals.task_finished, signals.SUCCEEDED)
        # A failure would still be logged, at ERROR: its line is made when it happens.
        assert signals.wanted(django_signals.task_finished, signals.FAILED)
        basic.add.enqueue(1, 2)
        factories.run_due(now=timezone.now())
    assert lines(caplog) == []
