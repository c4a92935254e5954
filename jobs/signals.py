"""django.tasks' signals, sent where this backend enqueues, starts and finishes a job.

Django connects its own logging receivers to them (the ``django.tasks`` log lines; the
worker writes its own line per outcome). Building a TaskResult for every job only for
receivers that would log nothing would cost the worker a large share of its speed, so a
signal is sent when sending it reaches someone (``wanted``): a receiver other than Django's
own, or Django's own with the ``django.tasks`` logger enabled at the level its line is
logged at. Then it goes to every receiver, as Django sends it. Whether a user sees Django's
lines depends on that logger alone, not on what else happens to be connected.

``task_finished`` is sent once per job, when it finishes: succeeded, or failed for good
(dead). An attempt that will be retried is not a finished task.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from django.dispatch import Signal
from django.tasks import TaskResult, TaskResultStatus
from django.tasks import signals as task_signals
from django.tasks.base import TaskError
from django.utils import timezone

from .payloads import error_record

task_enqueued = task_signals.task_enqueued
task_started = task_signals.task_started
task_finished = task_signals.task_finished

# The levels of Django's own lines (django/tasks/signals.py): enqueued at DEBUG, started at
# INFO, finished at INFO, or at ERROR when the task failed.
ENQUEUED = logging.DEBUG
STARTED = logging.INFO
SUCCEEDED = logging.INFO
FAILED = logging.ERROR

_django_logger = logging.getLogger("django.tasks")
_DJANGO_OWN = {
    id(task_signals.log_task_enqueued),
    id(task_signals.log_task_started),
    id(task_signals.log_task_finished),
}

# signal -> (a copy of its receivers list as it was, whether anything but Django's own
# listens, whether Django's own does).
_listeners: dict[int, tuple[list[Any], bool, bool]] = {}


def wanted(signal: Signal, level: int) -> bool:
    """Whether sending ``signal`` now reaches anyone: a receiver other than Django's
    logging ones, or Django's own receiver while the ``django.tasks`` logger is enabled at
    ``level`` (the level Django logs that line at). Asked for every job: the receivers are
    looked at again only when one is connected or disconnected, and the logger answers from
    its own cache."""
    others, django_own = _listening(signal)
    return others or (django_own and _django_logger.isEnabledFor(level))


def _listening(signal: Signal) -> tuple[bool, bool]:
    """(anything but Django's own receivers, Django's own receiver) connected to ``signal``.
    Kept until the receivers change (the list compares equal to its copy, entry by entry,
    identity first: in C)."""
    receivers = signal.receivers
    known = _listeners.get(id(signal))
    if known is not None and known[0] == receivers:
        return known[1], known[2]
    keys = [lookup_key[0] for lookup_key, *_ in receivers]
    others = any(key not in _DJANGO_OWN for key in keys)
    django_own = any(key in _DJANGO_OWN for key in keys)
    _listeners[id(signal)] = (list(receivers), others, django_own)
    return others, django_own


def send_finished_robust(
    sender: type, running: TaskResult, *, value: Any = None, error: BaseException | None = None
) -> list[tuple[Any, Any]]:
    """Send task_finished for a job that ran: ``value`` if it succeeded, else ``error``.
    Every receiver is called even if one raises; returns (receiver, response or error)."""
    now = timezone.now()
    if error is None:
        result = replace(running, status=TaskResultStatus.SUCCESSFUL, finished_at=now)
        object.__setattr__(result, "_return_value", value)
    else:
        record = error_record(error)
        errors = [
            *running.errors,
            TaskError(exception_class_path=record["exception"], traceback=record["traceback"]),
        ]
        result = replace(running, status=TaskResultStatus.FAILED, finished_at=now, errors=errors)
    return task_finished.send_robust(sender=sender, task_result=result)
