"""The results enqueue and get_result hand back: ``JobResult``, made for jobs being
inserted (``new_results``: thousands per bulk enqueue, made while PostgreSQL writes them),
completed with what the insert returned (``settle``), or read from a job row
(``read_result``, ``result_from_job``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.tasks import Task, TaskResult
from django.tasks.base import TASK_REFRESH_ATTRS, TaskError
from django.tasks.exceptions import TaskResultDoesNotExist

from . import store
from .models import Job
from .payloads import stored_value
from .progress import view as progress_view
from .registry import on_backend, resolve_task
from .states import TASK_STATUS, State


@dataclass(frozen=True, slots=True, kw_only=True)
class JobResult(TaskResult):  # type: ignore[misc]  # frozen at run time, not in the stubs
    """A TaskResult that also tells whether enqueue found an existing job by dedupe key,
    and what its handler last reported (jobs/progress.py: done, total, percent, message,
    updated_at; None if it never did)."""

    deduplicated: bool = False
    progress: dict[str, Any] | None = None

    @classmethod
    def of_new_job(
        cls,
        task: Task,
        job: store.NewJob,
        *,
        backend: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> JobResult:
        """The result of a job being inserted, of these ``args`` and ``kwargs``. They are
        what the handler will get (payloads.stored_value: copied when JSON keeps them as they
        are, else decoded from the JSON stored), and the dataclass's __init__ is not run: a
        bulk enqueue makes thousands of these. ``enqueued_at`` is the row's created_at, set
        once the database has returned it (``settle``, ``stamp``)."""
        result = cls.__new__(cls)
        _set_task(result, task)
        _set_id(result, str(job.id))
        _set_status(result, _QUEUED)
        _set_enqueued_at(result, None)
        _set_started_at(result, None)
        _set_finished_at(result, None)
        _set_last_attempted_at(result, None)
        _set_args(result, stored_value(args, job.args))
        _set_kwargs(result, stored_value(kwargs, job.kwargs))
        _set_backend(result, backend)
        _set_errors(result, [])
        _set_worker_ids(result, [])
        _set_return_value(result, None)
        _set_deduplicated(result, False)
        _set_progress(result, None)
        for name, default, factory in _OTHER_RESULT_FIELDS:
            object.__setattr__(result, name, factory() if factory is not None else default)
        return result

    def refresh(self) -> None:
        refreshed = self.task.get_backend().get_result(self.id)
        for attr in (*TASK_REFRESH_ATTRS, "progress"):
            object.__setattr__(self, attr, getattr(refreshed, attr))


# JobResult.of_new_job sets the fields through their slots' own setters: the frozen
# dataclass's fields, without the lookup object.__setattr__ makes each time (half the cost
# of a result, of which a bulk enqueue makes thousands). The fields it does not set, with
# their defaults, are those a later Django adds to TaskResult.
_QUEUED = TASK_STATUS[State.QUEUED]
_SET_BY_OF_NEW_JOB = (
    "task", "id", "status", "enqueued_at", "started_at", "finished_at", "last_attempted_at", "args",
    "kwargs", "backend", "errors", "worker_ids", "_return_value", "deduplicated", "progress",
)  # fmt: skip
(
    _set_task, _set_id, _set_status, _set_enqueued_at, _set_started_at, _set_finished_at,
    _set_last_attempted_at, _set_args, _set_kwargs, _set_backend, _set_errors, _set_worker_ids,
    _set_return_value, _set_deduplicated, _set_progress,
) = (getattr(JobResult, name).__set__ for name in _SET_BY_OF_NEW_JOB)  # fmt: skip
_OTHER_RESULT_FIELDS = [
    (
        f.name,
        None if f.default is MISSING else f.default,
        None if f.default_factory is MISSING else f.default_factory,
    )
    for f in fields(JobResult)
    if f.name not in _SET_BY_OF_NEW_JOB
]


# One enqueue call: the task, its args and its kwargs.
Call = tuple[Task, Sequence[Any], dict[str, Any]]


def new_results(calls: Sequence[Call], rows: Sequence[store.NewJob], *, backend: str) -> list[JobResult]:
    """The results of the calls' jobs, being inserted as ``rows`` on ``backend`` (an alias)."""
    new = JobResult.of_new_job
    return [
        new(task, row, backend=backend, args=args, kwargs=kwargs)
        for (task, args, kwargs), row in zip(calls, rows, strict=True)
    ]


def stamp(results: Sequence[JobResult], enqueued_at: datetime) -> None:
    """Set the results' enqueued_at: the created_at of their rows, all written at once."""
    for result in results:
        _set_enqueued_at(result, enqueued_at)


def settle(
    results: list[JobResult],
    outcome: Sequence[tuple[uuid.UUID, datetime | None]],
    *,
    backend: str,
    database: str,
) -> None:
    """Complete the results of an insert with what it returned for each row
    (store.insert_jobs): a new job's enqueued_at is its row's created_at; a call that a
    dedupe key led back to an unfinished job gets that job's result, marked deduplicated
    (those jobs read in one query however many there are)."""
    held = []
    for index, (job_id, created_at) in enumerate(outcome):
        if created_at is None:
            held.append((index, job_id))
        else:
            _set_enqueued_at(results[index], created_at)
    if held:
        existing = {job.id: job for job in Job.objects.using(database).filter(id__in={i for _, i in held})}
        for index, job_id in held:
            results[index] = replace(result_from_job(existing[job_id], backend=backend), deduplicated=True)


def read_result(result_id: str, *, backend: str, database: str) -> JobResult:
    """The result of job ``result_id`` as ``backend`` (an alias) reports it, read from
    ``database``; TaskResultDoesNotExist if there is no such job."""
    try:
        job = Job.objects.using(database).get(id=uuid.UUID(str(result_id)))
    except (ValueError, Job.DoesNotExist) as exc:
        raise TaskResultDoesNotExist(result_id) from exc
    return result_from_job(job, backend=backend)


def result_from_job(job: Job, *, backend: str) -> JobResult:
    """The result of the job on this row, its task as enqueued on ``backend`` (an alias):
    the queue, priority and backend it was enqueued with, and its ``run_after`` while it
    has not started (see ``run_after``)."""
    task = on_backend(resolve_task(job.task_path), backend)
    after = run_after(job)
    if task.queue_name != job.queue_name or task.priority != job.priority or after != task.run_after:
        task = replace(task, queue_name=job.queue_name, priority=job.priority, run_after=after)
    result = JobResult(
        task=task,
        id=str(job.id),
        status=TASK_STATUS[State(job.state)],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.last_attempted_at,
        args=job.args,
        kwargs=job.kwargs,
        backend=backend,
        errors=[
            TaskError(exception_class_path=e.get("exception", ""), traceback=e.get("traceback", ""))
            for e in job.errors
        ],
        worker_ids=[str(w) for w in job.worker_ids],
        progress=progress_view(job.progress),
    )
    if job.state == State.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def run_after(job: Job) -> datetime | None:
    """The ``run_after`` the job was enqueued with, as far as its row still tells it. An
    enqueue writes ``run_at`` from ``run_after``, or makes it its own ``created_at`` (one
    statement time); until the job first starts, ``run_at`` moves only by an operator (run
    now, replay) or a limit deferring it, and it is still the earliest it will run. Once it has
    started, ``run_at`` is its next attempt's due time, and the enqueued value is not kept:
    a column for it would widen every job row for a value only this reads."""
    if job.started_at is None and job.run_at != job.created_at:
        return job.run_at
    return None
