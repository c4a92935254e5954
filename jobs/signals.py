"""django.tasks' signals, sent where this backend enqueues, starts and finishes a job.

Django connects its own logging receivers to them (``django.tasks`` log lines; the worker
writes its own line per outcome). Building a TaskResult for every job only for those would
cost the worker a large share of its speed, so the signals are sent when a receiver other
than Django's own is connected, and then to every receiver as Django would.

``task_finished`` is sent once per job, when it finishes: succeeded, or failed for good
(dead). An attempt that will be retried is not a finished task.
"""

from __future__ import annotations

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

_DJANGO_OWN = {
    id(task_signals.log_task_enqueued),
    id(task_signals.log_task_started),
    id(task_signals.log_task_finished),
}


# signal -> (a copy of its receivers list as it was, whether anything but Django's own
# listens).
_observed: dict[int, tuple[list[Any], bool]] = {}


def observed(signal: Signal) -> bool:
    """Whether anything but Django's own logging receivers listens to ``signal``. Asked for
    every job, so the answer is kept until a receiver is connected or disconnected (the
    list compares equal to its copy, entry by entry, identity first: in C)."""
    receivers = signal.receivers
    known = _observed.get(id(signal))
    if known is not None and known[0] == receivers:
        return known[1]
    answer = any(lookup_key[0] not in _DJANGO_OWN for lookup_key, *_ in receivers)
    _observed[id(signal)] = (list(receivers), answer)
    return answer


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
