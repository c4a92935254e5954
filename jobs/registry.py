"""Task resolution shared by the web and the worker: the Task a job row names, and the
exception classes its ``non_retryable`` option names. Both sides import this module; the
worker needs no part of the enqueue backend for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from django.tasks import Task
from django.utils.module_loading import import_string

from .exceptions import BadTaskOptions, UnknownTask


def resolve_task(task_path: str) -> Task:
    """The Task object a job names, or UnknownTask with the reason."""
    try:
        task = import_string(task_path)
    except Exception as exc:
        # Not only ImportError: a malformed path (".x") raises ValueError or TypeError, and a
        # module may raise anything while it is imported. Either way the row cannot run.
        raise UnknownTask(f"task {task_path!r} cannot be imported: {exc!r}") from exc
    if not isinstance(task, Task):
        raise UnknownTask(f"{task_path!r} is not a task (decorate it with @task)")
    return task


def on_backend(task: Task, alias: str) -> Task:
    """The task as the backend ``alias`` runs it. A job row names only the task's path, and
    a task declared for another backend (a site's default) reaches ours through
    ``.using(backend=alias)``. Not validated again (Task.using would): the job was
    validated when it was enqueued."""
    if task.backend == alias:
        return task
    bound = object.__new__(type(task))
    for f in fields(task):
        object.__setattr__(bound, f.name, getattr(task, f.name))
    object.__setattr__(bound, "backend", alias)
    return bound


def exception_classes(paths: Sequence[str], *, owner: str) -> tuple[type[BaseException], ...]:
    """Import ``non_retryable`` dotted paths; BadTaskOptions says which one is wrong."""
    return tuple(_exception_class(path, owner) for path in paths)


def _exception_class(path: str, owner: str) -> type[BaseException]:
    # A JobsError, so that a worker meeting a bad row sends the job to dead with this
    # reason instead of crashing on it while deciding the job's outcome.
    try:
        found = import_string(path)
    except Exception as exc:
        raise BadTaskOptions(
            f"non_retryable of {owner} names {path!r}, which cannot be imported: {exc!r}"
        ) from exc
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise BadTaskOptions(f"non_retryable of {owner} names {path!r}, which is not an exception class")
    return found
