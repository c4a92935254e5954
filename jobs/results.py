"""The results enqueue and get_result hand back: ``JobResult``, made from a job just
inserted (``JobResult.of_new_job``, thousands per bulk enqueue) or from a job row
(``result_from_job``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.tasks import Task, TaskResult
from django.tasks.base import TASK_REFRESH_ATTRS, TaskError

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
        enqueued_at: datetime,
        backend: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> JobResult:
        """The result of a job just inserted, of these ``args`` and ``kwargs``. They are what
        the handler will get (payloads.stored_value: copied when JSON keeps them as they are,
        else decoded from the JSON stored), and the dataclass's __init__ is not run: a bulk
        enqueue makes thousands of these."""
        result = cls.__new__(cls)
        _set_task(result, task)
        _set_id(result, str(job.id))
        _set_status(result, _QUEUED)
        _set_enqueued_at(result, enqueued_at)
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


def result_from_job(job: Job, *, backend: str) -> JobResult:
    """The result of the job on this row, its task as enqueued on ``backend`` (an alias)."""
    task = on_backend(resolve_task(job.task_path), backend)
    if task.queue_name != job.queue_name or task.priority != job.priority:
        task = replace(task, queue_name=job.queue_name, priority=job.priority)
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
