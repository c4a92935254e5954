"""Checks on a schedule's fields, shared by the admin form (``Schedule.clean``), the sync of
code-declared schedules and the scheduler itself, so each says the same thing."""

from __future__ import annotations

import inspect
import json
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.tasks import Task

from ..conf import backend_alias, backend_queues, jobs_settings
from ..exceptions import JobsError
from ..registry import on_backend, resolve_task
from .cron import InvalidTiming, Timing, neither_or_both, zone_named

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
    return backend_queues() or None


def schedule_errors(schedule: Schedule, *, unchecked: Collection[str] = ()) -> dict[str, list[str]]:
    """Every problem with the schedule, by field (the cron/interval pair's under ``cron``).

    A check that reads a field in ``unchecked`` is left out, as Django leaves out the
    constraints on fields excluded from validation: a form excludes a field whose input it
    could not read (args that are not JSON), so the schedule still holds the old value,
    and a check of that value would report a problem with something nobody typed."""
    skip = set(unchecked)
    errors: dict[str, list[str]] = defaultdict(list)
    if not skip & {"cron", "interval_seconds", "time_zone"}:
        _check_timing(schedule, errors)
    _check_task(schedule, errors, skip)
    queues = configured_queues()
    if "queue_name" not in skip and queues is not None and schedule.queue_name not in queues:
        errors["queue_name"].append(
            f"unknown queue {schedule.queue_name!r}; configured queues: {', '.join(queues)}"
        )
    if "priority" not in skip and (
        not isinstance(schedule.priority, int) or not -100 <= schedule.priority <= 100
    ):
        errors["priority"].append("priority must be a whole number from -100 to 100")
    if (
        not skip & {"catchup", "catchup_window"}
        and schedule.catchup == "all"
        and not (isinstance(schedule.catchup_window, int) and schedule.catchup_window > 0)
    ):
        errors["catchup_window"].append("catching up 'all' needs a window of at least one second")
    return dict(errors)


def raise_for_errors(schedule: Schedule, *, unchecked: Collection[str] = ()) -> None:
    """ValidationError keyed by field, for forms (``unchecked`` as in schedule_errors)."""
    errors = schedule_errors(schedule, unchecked=unchecked)
    if errors:
        raise ValidationError(errors)


def check(schedule: Schedule) -> Checked:
    """The schedule's timing and task, or InvalidSchedule naming every problem."""
    errors = schedule_errors(schedule)
    if errors:
        raise InvalidSchedule(describe(errors))
    # Our backend's, whatever backend the task was declared for: the job goes in with the
    # schedule's row, on its connection (invariant 1), never through a site's other default.
    task = on_backend(resolve_task(schedule.task_path), backend_alias())
    return Checked(timing=timing_of(schedule), task=task)


def describe(errors: dict[str, list[str]]) -> str:
    """The errors on one line: ``field: message; ...``."""
    return "; ".join(f"{name}: {message}" for name, messages in errors.items() for message in messages)


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
    wrong = neither_or_both(has_cron=bool(cron), has_interval=interval is not None)
    if wrong:
        # On a field, not the form: a form then leaves out the database constraint on the
        # pair, which would say it again under its own name.
        errors["cron"].append(wrong)
        return
    try:
        Timing.parse(cron=cron or None, interval=interval, zone=zone)
    except InvalidTiming as exc:
        errors["cron" if cron else "interval_seconds"].append(str(exc))


def _check_task(schedule: Schedule, errors: dict[str, list[str]], skip: set[str]) -> None:
    payload_read = not skip & {"args", "kwargs"}
    if payload_read:
        _check_payload(schedule.args, schedule.kwargs, errors)
    if "task_path" in skip:
        return
    try:
        task = resolve_task(schedule.task_path)
    except JobsError as exc:
        errors["task_path"].append(str(exc))
        return
    if not payload_read or "args" in errors or "kwargs" in errors:
        return
    try:
        extra = (None,) if task.takes_context else ()
        inspect.signature(task.func).bind(*extra, *schedule.args, **schedule.kwargs)
    except TypeError as exc:
        errors["args"].append(f"args and kwargs do not fit {schedule.task_path}: {exc}")


def _check_payload(args: object, kwargs: object, errors: dict[str, list[str]]) -> None:
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
