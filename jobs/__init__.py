"""The queue engine's public API: the names applications import.

Tasks are Django's own (``from django.tasks import task``) on the Postgres backend, which
takes the options in ``JOB_OPTIONS`` beyond Django's (``@task(max_attempts=5,
concurrency_limit=2, ...)`` or ``.using(...)``). A handler steers its job with ``Retry``,
``Snooze`` and ``Discard``, and with ``takes_context=True`` receives a ``JobContext``
(progress, cancel checks). Schedules are declared with ``declare(ScheduleSpec(...))``;
workflows are built from ``chain``, ``group``, ``chord``, ``step`` and ``wait_signal`` and
started with ``Workflow``'s helpers in ``jobs.workflows``.

Names load when first used: importing ``jobs`` (an app's ``ready()``, a settings module)
loads no model and no part of the worker.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# The distribution's version (pyproject.toml reads it from here); CHANGELOG.md says what changed.
__version__ = "0.1.0"

if TYPE_CHECKING:
    from .backend import JOB_OPTIONS, enqueue_many
    from .exceptions import Discard, InvalidPayload, JobCancelled, JobsError, Retry, Snooze
    from .limits import LimitSpec
    from .progress import JobContext
    from .scheduler.declared import ScheduleSpec, declare
    from .workflows import Workflow, chain, chord, group, send_signal, step, wait_signal

_EXPORTS = {
    "JOB_OPTIONS": ".backend",
    "enqueue_many": ".backend",
    "Discard": ".exceptions",
    "InvalidPayload": ".exceptions",
    "JobCancelled": ".exceptions",
    "JobsError": ".exceptions",
    "Retry": ".exceptions",
    "Snooze": ".exceptions",
    "LimitSpec": ".limits",
    "JobContext": ".progress",
    "ScheduleSpec": ".scheduler.declared",
    "declare": ".scheduler.declared",
    "Workflow": ".workflows",
    "chain": ".workflows",
    "chord": ".workflows",
    "group": ".workflows",
    "send_signal": ".workflows",
    "step": ".workflows",
    "wait_signal": ".workflows",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jobs' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "JOB_OPTIONS", "Discard", "InvalidPayload", "JobCancelled", "JobContext", "JobsError",
    "LimitSpec", "Retry", "ScheduleSpec", "Snooze", "Workflow", "chain", "chord", "declare",
    "enqueue_many", "group", "send_signal", "step", "wait_signal",
]  # fmt: skip
