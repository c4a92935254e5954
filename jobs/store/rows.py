"""A job row to insert (``NewJob``: its own columns and its task's ``JobOptions``), and the
values each way of writing it takes: an INSERT's parameters, a row of a COPY. The options'
columns come from jobs.options (``OPTION_COLUMNS``, ``column_values``), in one piece."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..options import OPTION_COLUMNS, JobOptions


@dataclass(slots=True)
class NewJob:
    """A validated row to insert; args and kwargs are already JSON text. (Not frozen: a
    frozen dataclass's __init__ costs four times as much, per job of a bulk enqueue.)"""

    id: uuid.UUID
    task_path: str
    queue_name: str
    priority: int
    args: str
    kwargs: str
    run_at: datetime | None
    # Its task's options: one value, shared by every job of the task.
    options: JobOptions
    dedupe_key: str | None = None
    dedupe_window: float | None = None
    trace_id: str = ""
    owner: str = ""
    public: bool = False
    expires_at: datetime | None = None
    limit_name: str | None = None
    limit_key: str = ""
    # A workflow step (jobs/workflows/): its node and place, inserted 'waiting'.
    workflow_node: uuid.UUID | None = None
    workflow_position: int | None = None

    def is_plain(self) -> bool:
        """No options of its own: every column but the basics takes its default."""
        return (
            self.options.plain and self.run_at is None and not self.owner and not self.public
            and self.expires_at is None and self.dedupe_key is None and self.limit_name is None
        )  # fmt: skip


# The job's own columns an INSERT writes beside its options' (insert_one.sql and _keyed,
# insert.sql).
_OWN_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "args", "kwargs", "run_at", "dedupe_key",
    "dedupe_window", "trace_id", "owner", "public", "expires_at",
)  # fmt: skip
ONE_COLUMNS = tuple(col for col in _OWN_COLUMNS if col not in ("dedupe_key", "dedupe_window"))
KEYED_COLUMNS = _OWN_COLUMNS
_MANY_COLUMNS = (*_OWN_COLUMNS, "limit_name", "limit_key")


def insert_params(job: NewJob, columns: Sequence[str]) -> dict[str, Any]:
    """The parameters of an INSERT of one row (insert_one.sql, insert_one_keyed.sql): the
    job's own ``columns`` and its options'."""
    params = {col: getattr(job, col) for col in columns}
    # Not strict: both come from JobOptions's fields, and this runs once per enqueue.
    params.update(zip(OPTION_COLUMNS, job.options.column_values, strict=False))
    return params


def insert_many_params(jobs: Sequence[NewJob]) -> dict[str, Any]:
    """The parameters of insert.sql: each column's values, a list of one per row."""
    params: dict[str, Any] = {col: [getattr(job, col) for job in jobs] for col in _MANY_COLUMNS}
    columns = zip(*(job.options.column_values for job in jobs), strict=True)
    params.update(zip(OPTION_COLUMNS, map(list, columns), strict=True))
    # unnest() cannot take an array per row: dotted paths joined by spaces instead.
    params["non_retryable"] = [" ".join(paths) for paths in params["non_retryable"]]
    return params


# A plain row's columns (insert_plain.sql, a COPY of bare rows): the columns' defaults
# stand for every other.
PLAIN_COLUMNS = ("id", "task_path", "queue_name", "priority", "args", "kwargs", "max_attempts", "trace_id")
_PLAIN_OWN_COLUMNS = tuple(col for col in PLAIN_COLUMNS if col != "max_attempts")


def plain_params(job: NewJob) -> dict[str, Any]:
    """The parameters of insert_plain.sql."""
    params = {col: getattr(job, col) for col in _PLAIN_OWN_COLUMNS}
    params["max_attempts"] = job.options.max_attempts
    return params


def plain_values(job: NewJob) -> tuple[Any, ...]:
    return (job.id, job.task_path, job.queue_name, job.priority, job.args, job.kwargs,
            job.options.max_attempts, job.trace_id)  # fmt: skip


# The columns of a COPY of rows with options of their own (and of a workflow's steps,
# which add theirs).
COPY_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "args", "kwargs", *OPTION_COLUMNS, "trace_id",
    "owner", "public", "expires_at",
)  # fmt: skip


def copy_values(job: NewJob) -> tuple[Any, ...]:
    return (job.id, job.task_path, job.queue_name, job.priority, job.args, job.kwargs,
            *job.options.column_values, job.trace_id, job.owner, job.public, job.expires_at)  # fmt: skip
