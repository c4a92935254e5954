"""Checks on a schedule's fields, shared by the admin form (``Schedule.clean``), the sync of
code-declared schedules and the scheduler itself, so each says the same thing."""

from __future__ import annotations

import inspect
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.tasks import Task

from ..backend import resolve_task
from ..conf import jobs_settings
from ..exceptions import JobsError
from .cron import InvalidTiming, Timing, zone_named

if TYPE_CHECKING:
    from ..models import Schedule


class InvalidSchedule(JobsError):
    """A schedule that cannot fire: bad timing, unknown task, payload or queue."""


@dataclass(frozen=True)
class Checked:
    """What firing a valid schedule needs: when, and which task."""

    timing: Timing
    task: Task


def configured_queues() -> list[str] | None:
    """The backend's queues; None when any name goes (an empty QUEUES, as in django.tasks)."""
    queues = settings.TASKS["default"].get("QUEUES", ["default"])
    return list(queues) or None


def schedule_errors(schedule: Schedule) -> dict[str, list[str]]:
    """Every problem with the schedule, by field (``__all__`` for the cron/interval pair)."""
    errors: dict[str, list[str]] = defaultdict(list)
    _check_timing(schedule, errors)
    _check_task(schedule, errors)
    queues = configured_queues()
    if queues is not None and schedule.queue_name not in queues:
        errors["queue_name"].append(
            f"unknown queue {schedule.queue_name!r}; configured queues: {', '.join(queues)}"
        )
    if not isinstance(schedule.priority, int) or not -100 <= schedule.priority <= 100:
        errors["priority"].append("priority must be a whole number from -100 to 100")
    if schedule.catchup == "all" and not (
        isinstance(schedule.catchup_window, int) and schedule.catchup_window > 0
    ):
        errors["catchup_window"].append("catching up 'all' needs a window of at least one second")
    return dict(errors)


def raise_for_errors(schedule: Schedule) -> None:
    """ValidationError keyed by field, for forms."""
    errors = schedule_errors(schedule)
    if errors:
        raise ValidationError(errors)


def check(schedule: Schedule) -> Checked:
    """The schedule's timing and task, or InvalidSchedule naming every problem."""
    errors = schedule_errors(schedule)
    if errors:
        raise InvalidSchedule(describe(errors))
    return Checked(timing=timing_of(schedule), task=resolve_task(schedule.task_path))


def describe(errors: dict[str, list[str]]) -> str:
    """The errors on one line: ``field: message; ...``."""
    return "; ".join(
        f"{'cron/interval' if name == NON_FIELD_ERRORS else name}: {message}"
        for name, messages in errors.items()
        for message in messages
    )


def timing_of(schedule: Schedule) -> Timing:
    return Timing.parse(cron=schedule.cron, interval=schedule.interval_seconds, zone=schedule.time_zone)


def _check_timing(schedule: Schedule, errors: dict[str, list[str]]) -> None:
    try:
        zone = zone_named(schedule.time_zone)
    except InvalidTiming as exc:
        errors["time_zone"].append(str(exc))
        return
    cron = (schedule.cron or "").strip()
    interval = schedule.interval_seconds
    if bool(cron) == (interval is not None):
        errors[NON_FIELD_ERRORS].append("give either a cron expression or an interval in seconds, not both")
        return
    try:
        Timing.parse(cron=cron or None, interval=interval, zone=zone)
    except InvalidTiming as exc:
        errors["cron" if cron else "interval_seconds"].append(str(exc))


def _check_task(schedule: Schedule, errors: dict[str, list[str]]) -> None:
    args, kwargs = schedule.args, schedule.kwargs
    if not isinstance(args, list):
        errors["args"].append(f"args must be a JSON list, not {type(args).__name__}")
    if not isinstance(kwargs, dict):
        errors["kwargs"].append(f"kwargs must be a JSON object, not {type(kwargs).__name__}")
    try:
        size = len(json.dumps(args, allow_nan=False)) + len(json.dumps(kwargs, allow_nan=False))
    except (TypeError, ValueError) as exc:
        errors["args"].append(f"args and kwargs must be JSON: {exc}")
        return
    limit = jobs_settings().MAX_PAYLOAD_BYTES
    if size > limit:
        errors["kwargs"].append(f"the payload is {size} bytes; the limit is {limit}. Pass ids, not data.")
    try:
        task = resolve_task(schedule.task_path)
    except JobsError as exc:
        errors["task_path"].append(str(exc))
        return
    if "args" in errors or "kwargs" in errors:
        return
    try:
        extra = (None,) if task.takes_context else ()
        inspect.signature(task.func).bind(*extra, *args, **kwargs)
    except TypeError as exc:
        errors["args"].append(f"args and kwargs do not fit {schedule.task_path}: {exc}")
