"""Running jobs with the worker's executor code, the clock moved instead of slept: outcomes,
retry timing, control-flow exceptions, rows that cannot run, and the results API."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.tasks import TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.test.utils import override_settings
from django.utils import timezone

from jobs import store
from jobs.exceptions import BadPayload, BadReturnValue, Discard
from jobs.models import Job
from jobs.retry import MAX_DELAY
from jobs.states import FINISHED, State
from tests.support import factories
from tests.tasks import basic, engine

pytestmark = pytest.mark.django_db

TICK = timedelta(microseconds=1)


def start() -> datetime:
    """A clock reading after everything enqueued so far is due."""
    return timezone.now() + timedelta(seconds=1)


def run_until_finished(job_id: str, *, at: datetime, limit: int = 20) -> list[datetime]:
    """Run the job each time it comes due, checking it is not claimable a moment before;
    return the clock reading of each attempt."""
    times = []
    for _ in range(limit):
        assert len(factories.run_due(now=at)) == 1
        times.append(at)
        job = Job.objects.get(id=job_id)
        if job.state in FINISHED:
            return times
        assert factories.run_due(now=job.run_at - TICK) == []
        at = job.run_at
    raise AssertionError(f"job {job_id} did not finish in {limit} runs")


# --- retry timing -------------------------------------------------------------------------


def test_a_failing_job_is_retried_after_its_backoff_then_dead_with_every_error() -> None:
    result = basic.fail_always.enqueue("boom")
    at = start()
    # fail_always: 3 attempts, backoff base 10s, equal jitter.
    for attempt, backoff in ((1, 10), (2, 20)):
        factories.run_due(now=at)
        job = Job.objects.get(id=result.id)
        assert (job.state, job.attempt) == (State.SCHEDULED, attempt)
        assert at + timedelta(seconds=backoff / 2) <= job.run_at <= at + timedelta(seconds=backoff)
        assert factories.run_due(now=job.run_at - TICK) == []
        at = job.run_at
    factories.run_due(now=at)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.finished_at, job.last_error) == (State.DEAD, 3, at, "boom")
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert len({e["worker"] for e in job.errors}) == 3
    for entry in job.errors:
        assert (entry["exception"], entry["message"]) == ("builtins.RuntimeError", "boom")
        assert entry["traceback"].startswith("Traceback (most recent call last):")
        assert "in fail_always" in entry["traceback"]
        assert entry["traceback"].rstrip().endswith("RuntimeError: boom")
    assert factories.run_due(now=at + timedelta(days=1)) == []


def test_the_backoff_is_capped() -> None:
    result = engine.fail_capped.enqueue()
    times = run_until_finished(result.id, at=start())
    # Base 1s, cap 3s: full backoffs 1, 2, 3 (capped from 4); equal jitter keeps half.
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert len(gaps) == 3
    for gap, full in zip(gaps, (1, 2, 3), strict=True):
        assert full / 2 <= gap <= full
    assert Job.objects.get(id=result.id).state == State.DEAD


def test_without_jitter_the_backoff_is_exact() -> None:
    result = engine.fail_without_jitter.enqueue()
    times = run_until_finished(result.id, at=start())
    assert [b - a for a, b in itertools.pairwise(times)] == [
        timedelta(seconds=8),
        timedelta(seconds=16),
    ]


def test_retry_after_n_seconds_overrides_the_backoff() -> None:
    result = basic.retry_after.enqueue(42)
    at = start()
    factories.run_due(now=at)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.run_at) == (State.SCHEDULED, 1, at + timedelta(seconds=42))
    assert (job.errors[0]["exception"], job.last_error) == ("jobs.exceptions.Retry", "provider busy")
    times = run_until_finished(result.id, at=job.run_at)
    # Retry asks for another attempt, not for more attempts than the task allows (5).
    assert len(times) == 4
    job.refresh_from_db()
    assert (job.state, job.attempt) == (State.DEAD, 5)


def test_a_retry_far_in_the_future_is_stored() -> None:
    result = basic.retry_after.enqueue(1e15)
    at = start()
    factories.run_due(now=at)
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt) == (State.SCHEDULED, 1)
    assert job.run_at == at + timedelta(seconds=MAX_DELAY)


def test_snooze_reschedules_without_using_an_attempt() -> None:
    result = basic.snooze.enqueue(30)
    at = start()
    for _ in range(7):
        factories.run_due(now=at)
        job = Job.objects.get(id=result.id)
        assert (job.state, job.attempt, job.worker_ids, job.errors) == (State.SCHEDULED, 0, [], [])
        assert job.run_at == at + timedelta(seconds=30)
        at = job.run_at
    # More snoozes than max_attempts (5): still waiting, never dead.
    assert job.max_attempts == 5


def test_discard_sends_the_job_to_dead_at_once_with_its_reason() -> None:
    result = basic.discard.enqueue("account closed")
    factories.run_due(now=start())
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.last_error) == (State.DEAD, 1, "account closed")
    assert job.errors[0]["exception"] == f"{Discard.__module__}.{Discard.__qualname__}"


@pytest.mark.parametrize(
    ("task", "exception"),
    [(basic.fail_value_error, "builtins.ValueError"), (engine.fail_fatal, "tests.tasks.engine.Fatal")],
)
def test_non_retryable_exceptions_are_dead_on_the_first_attempt(task, exception: str) -> None:
    result = task.enqueue()
    factories.run_due(now=start())
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.max_attempts) == (State.DEAD, 1, 5)
    assert job.errors[0]["exception"] == exception


def test_a_return_value_that_is_not_json_is_dead() -> None:
    result = basic.returns_object.enqueue()
    factories.run_due(now=start())
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt) == (State.DEAD, 1)
    assert job.errors[0]["exception"] == "jobs.exceptions.BadReturnValue"
    assert job.last_error.startswith("return value is not JSON: Object of type object")


@pytest.mark.parametrize("task", [engine.return_nul, engine.return_surrogate])
def test_a_return_value_jsonb_cannot_store_is_dead(task) -> None:
    result = task.enqueue()
    factories.run_due(now=start())
    job = Job.objects.get(id=result.id)
    assert job.state == State.DEAD
    assert job.errors[0]["exception"] == f"{BadReturnValue.__module__}.BadReturnValue"


def test_an_error_message_with_a_nul_character_is_recorded() -> None:
    result = engine.fail_with_nul.enqueue()
    factories.run_due(now=start())
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.last_error) == (State.SCHEDULED, 1, "bad byte \\x00 in the message")


def test_an_error_message_with_a_lone_surrogate_is_recorded() -> None:
    result = engine.fail_with_surrogate.enqueue()
    factories.run_due(now=start())
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempt, job.last_error) == (State.SCHEDULED, 1, "cannot open /tmp/caf\\udce9")
    assert job.errors[0]["traceback"].rstrip().endswith("OSError: cannot open /tmp/caf\\udce9")


# --- rows that cannot run ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            engine.misconfigured,
            "non_retryable of tests.tasks.engine.misconfigured names "
            "'tests.tasks.engine.NoSuchError', which cannot be imported: ImportError(",
        ),
        (
            engine.misconfigured_not_exception,
            "non_retryable of tests.tasks.engine.misconfigured_not_exception names "
            "'tests.tasks.engine.record_key', which is not an exception class",
        ),
    ],
)
def test_a_task_whose_options_cannot_be_applied_is_refused_at_enqueue_and_dead_if_a_row_has_them(
    task, message: str
) -> None:
    with pytest.raises(InvalidTask) as refused:
        task.enqueue()
    assert str(refused.value).startswith(message), refused.value
    assert not Job.objects.exists()
    # A row that names them anyway (written by an older version, or by hand) cannot run.
    bad = factories.job(State.QUEUED, task_path=task.module_path, non_retryable=list(task.non_retryable))
    good = basic.add.enqueue(1, 2)
    factories.run_due(now=start())
    job = Job.objects.get(id=bad.id)
    assert (job.state, job.attempt) == (State.DEAD, 1)
    assert job.errors[0]["exception"] == "jobs.exceptions.BadTaskOptions"
    assert job.last_error.startswith(message), job.last_error
    assert Job.objects.get(id=good.id).state == State.SUCCEEDED


UNKNOWN_TASKS = [
    (
        "tests.tasks.basic.no_such_task",
        "task 'tests.tasks.basic.no_such_task' cannot be imported: ImportError(",
    ),
    ("no.such.module.task", "task 'no.such.module.task' cannot be imported: ModuleNotFoundError("),
    (".x", "task '.x' cannot be imported: ValueError('Empty module name')"),
    (
        "tests.tasks.engine.record_key",
        "'tests.tasks.engine.record_key' is not a task (decorate it with @task)",
    ),
]


@pytest.mark.parametrize(("task_path", "message"), UNKNOWN_TASKS)
def test_a_job_whose_task_does_not_import_waits_using_no_attempt(task_path: str, message: str) -> None:
    # A deploy may be rolling out: this worker may not have the new task yet.
    bad = factories.job(State.QUEUED, max_attempts=1, task_path=task_path)
    at = start()
    for _ in range(3):
        factories.run_due(now=at)
        job = Job.objects.get(id=bad.id)
        assert (job.state, job.attempt, job.worker_ids) == (State.SCHEDULED, 0, [])
        assert job.last_error.startswith(message), job.last_error
        assert at + timedelta(seconds=0.5) <= job.run_at <= at + timedelta(seconds=60)
        at = job.run_at
    assert [e["exception"] for e in job.errors] == ["jobs.exceptions.UnknownTask"] * 3


@pytest.mark.parametrize(("task_path", "message"), UNKNOWN_TASKS)
@override_settings(JOBS={"UNKNOWN_TASK_GRACE": 60.0})
def test_a_job_whose_task_never_imports_is_dead_after_the_grace(task_path: str, message: str) -> None:
    bad = factories.job(State.QUEUED, task_path=task_path, now=timezone.now() - timedelta(seconds=61))
    good = basic.add.enqueue(1, 2)
    factories.run_due(now=start())
    job = Job.objects.get(id=bad.id)
    assert (job.state, job.attempt) == (State.DEAD, 1)
    assert job.last_error.startswith(message), job.last_error
    assert job.errors[0]["exception"] == "jobs.exceptions.UnknownTask"
    assert Job.objects.get(id=good.id).state == State.SUCCEEDED


@pytest.mark.parametrize(
    ("columns", "exception", "message"),
    [
        (
            {"task_path": "tests.tasks.basic.add", "args": {"a": 1}},
            BadPayload,
            "payload must be a list of args and a dict of kwargs, got dict and dict",
        ),
        (
            {"task_path": "tests.tasks.basic.add", "kwargs": [1]},
            BadPayload,
            "payload must be a list of args and a dict of kwargs, got list and list",
        ),
        (
            {"task_path": "tests.tasks.basic.add", "args": [1, 2, 3]},
            BadPayload,
            "payload does not fit the task's signature: too many positional arguments",
        ),
        (
            {"task_path": "tests.tasks.basic.add", "args": [1], "kwargs": {"c": 2}},
            BadPayload,
            "payload does not fit the task's signature: ",
        ),
        (
            {"task_path": "tests.tasks.basic.report_attempt", "kwargs": {"context": 1}},
            BadPayload,
            "payload does not fit the task's signature: multiple values for argument 'context'",
        ),
    ],
)
def test_a_row_that_cannot_run_is_dead_with_the_reason(
    columns: dict, exception: type[Exception], message: str
) -> None:
    bad = factories.job(State.QUEUED, max_attempts=5, **columns)
    good = basic.add.enqueue(1, 2)
    factories.run_due(now=start())
    job = Job.objects.get(id=bad.id)
    assert (job.state, job.attempt) == (State.DEAD, 1)
    assert job.last_error.startswith(message), job.last_error
    assert job.errors[0]["exception"] == f"jobs.exceptions.{exception.__name__}"
    assert Job.objects.get(id=good.id).state == State.SUCCEEDED


# --- results through Django's API ---------------------------------------------------------------


def test_a_succeeded_job_through_get_result_and_refresh() -> None:
    result = basic.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    at = start()
    factories.run_due(now=at)
    result.refresh()
    assert (result.status, result.return_value, result.errors) == (TaskResultStatus.SUCCESSFUL, 5, [])
    assert result.is_finished and result.attempts == 1
    assert result.started_at == result.last_attempted_at == result.finished_at == at
    assert result.enqueued_at is not None
    fetched = basic.add.get_result(result.id)
    assert (fetched.id, fetched.args, fetched.return_value) == (result.id, [2, 3], 5)
    assert fetched.worker_ids == result.worker_ids and len(fetched.worker_ids) == 1


def test_json_return_values_come_back_as_json() -> None:
    result = engine.return_value.enqueue({"ids": [1, 2], "ok": True, "name": "x", "none": None, "ratio": 0.5})
    factories.run_due(now=start())
    result.refresh()
    assert result.return_value == {"ids": [1, 2], "ok": True, "name": "x", "none": None, "ratio": 0.5}


def test_a_failed_job_through_get_result() -> None:
    result = basic.fail_always.enqueue("nope")
    run_until_finished(result.id, at=start())
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert [e.exception_class for e in result.errors] == [RuntimeError] * 3
    assert all("RuntimeError: nope" in e.traceback for e in result.errors)


def test_a_job_waiting_for_its_retry_is_ready_again() -> None:
    result = basic.fail_always.enqueue()
    factories.run_due(now=start())
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == (TaskResultStatus.READY, 1, 1)


def test_a_running_job_is_running() -> None:
    job = factories.job(State.RUNNING, task_path="tests.tasks.basic.add", args=[1, 2])
    assert basic.add.get_result(str(job.id)).status == TaskResultStatus.RUNNING


def test_a_cancelled_job_is_failed() -> None:
    result = basic.add.enqueue(1, 2)
    store.cancel(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


@pytest.mark.parametrize("result_id", ["00000000-0000-4000-8000-000000000000", "not-a-uuid", ""])
def test_get_result_of_an_unknown_id_raises(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        basic.add.get_result(result_id)


def test_get_result_through_another_task_raises_mismatch() -> None:
    result = basic.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        basic.noop.get_result(result.id)


def test_get_result_keeps_the_queue_and_priority_the_job_was_enqueued_with() -> None:
    result = basic.add.using(queue_name="email", priority=-3).enqueue(1, 2)
    fetched = basic.add.get_result(result.id)
    assert (fetched.task.queue_name, fetched.task.priority) == ("email", -3)


# --- async tasks and the task context ---------------------------------------------------------


def test_an_async_task_runs() -> None:
    result = basic.async_add.enqueue(20, 22)
    factories.run_due(now=start())
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_the_context_attempt_number_is_right_across_retries() -> None:
    result = basic.report_attempt.enqueue(fail_until=2)
    run_until_finished(result.id, at=start())
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, 3, 3)
    assert [e.traceback.rstrip().splitlines()[-1] for e in result.errors] == [
        "RuntimeError: attempt 1 fails",
        "RuntimeError: attempt 2 fails",
    ]


def test_the_context_attempt_number_continues_from_the_rows_attempts() -> None:
    job = factories.job(State.QUEUED, task_path="tests.tasks.basic.report_attempt", attempt=1)
    factories.run_due(now=start())
    assert basic.report_attempt.get_result(str(job.id)).return_value == 2


def test_async_refresh_and_get_result() -> None:
    result = basic.add.enqueue(1, 1)
    factories.run_due(now=start())
    async_to_sync(result.arefresh)()
    assert result.return_value == 2
    fetched = async_to_sync(basic.add.aget_result)(result.id)
    assert fetched.return_value == 2
