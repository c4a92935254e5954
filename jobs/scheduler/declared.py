"""Schedules declared in code, synced into the database when a scheduler starts.

Three sources, later ones overriding earlier ones by name:

1. the engine's built-ins (``BUILTIN``): pruning finished jobs and old fire records;
2. apps, by calling ``declare()`` from their ``AppConfig.ready()``. This is the hook for
   the accounts app's "delete expired, never-verified signups"; once that app has the task
   it adds, in ``AccountsConfig.ready``::

       from jobs.scheduler import ScheduleSpec, declare

       declare(ScheduleSpec(name="accounts.delete_unverified_signups",
                            task="accounts.tasks.delete_unverified_signups",
                            cron="*/30 * * * *", catchup="latest", overlap="skip"))

3. ``settings.JOBS["SCHEDULES"]``: ``{"name": {"task": ..., "cron": ...}}`` adds or
   replaces one (keys as in ScheduleSpec, ``queue`` for the queue), ``{"name": None}``
   drops a built-in or app-declared one.

Synced rows are marked ``source=code``. The declaration owns every field but ``enabled``,
which is set when the row is created and then left to the console, so an operator can pause
a code-declared schedule and a restart does not undo it. A code-declared row no longer
declared anywhere is deleted. A declaration that fails validation is logged and not
written; a database schedule of the same name is never overwritten.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from django.db import IntegrityError, transaction

from ..conf import jobs_settings
from ..models import Catchup, Overlap, Schedule, ScheduleSource, default_time_zone
from .validation import configured_queues, describe, schedule_errors

logger = logging.getLogger("jobs.scheduler")


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    task: str
    cron: str | None = None
    interval: int | None = None
    args: tuple[Any, ...] | list[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # None: JOBS["SCHEDULER_TIME_ZONE"].
    time_zone: str | None = None
    # None: "default" if configured, else the first configured queue.
    queue: str | None = None
    priority: int = 0
    catchup: str = Catchup.SKIP
    catchup_window: int = 3600
    overlap: str = Overlap.ALLOW
    # Only used when the row is created.
    enabled: bool = True

    def row_values(self) -> dict[str, Any]:
        """The model fields this declaration owns."""
        queues = configured_queues() or ["default"]
        return {
            "task_path": self.task,
            "cron": self.cron or "",
            "interval_seconds": self.interval,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "time_zone": self.time_zone or default_time_zone(),
            "queue_name": self.queue or ("default" if "default" in queues else queues[0]),
            "priority": self.priority,
            "catchup": self.catchup,
            "catchup_window": self.catchup_window,
            "overlap": self.overlap,
        }


BUILTIN = (
    ScheduleSpec(
        name="jobs.prune_jobs",
        task="jobs.tasks.prune_jobs",
        cron="17 3 * * *",
        catchup=Catchup.LATEST,
        overlap=Overlap.SKIP,
        priority=-50,
    ),
    ScheduleSpec(
        name="jobs.prune_fire_records",
        task="jobs.tasks.prune_fire_records",
        cron="27 3 * * *",
        catchup=Catchup.LATEST,
        overlap=Overlap.SKIP,
        priority=-50,
    ),
)

_declared: dict[str, ScheduleSpec] = {}


def declare(spec: ScheduleSpec) -> None:
    """Declare a schedule from an app (call it from ``AppConfig.ready``)."""
    _declared[spec.name] = spec


class DeclarationError(ValueError):
    """A JOBS["SCHEDULES"] entry that is not a mapping of ScheduleSpec keys."""


def declared_specs() -> tuple[dict[str, ScheduleSpec], dict[str, str]]:
    """The declarations in force, by name, and the settings entries that could not be read."""
    specs = {spec.name: spec for spec in BUILTIN}
    specs.update(_declared)
    broken: dict[str, str] = {}
    for name, options in jobs_settings().SCHEDULES.items():
        if options is None:
            specs.pop(name, None)
            continue
        try:
            specs[name] = _spec_from_settings(name, options)
        except DeclarationError as exc:
            broken[name] = str(exc)
    return specs, broken


def _spec_from_settings(name: str, options: Mapping[str, Any]) -> ScheduleSpec:
    if not isinstance(options, Mapping):
        raise DeclarationError("must be a dict of schedule options, or None")
    known = {f.name for f in fields(ScheduleSpec)} - {"name"}
    unknown = set(options) - known
    if unknown:
        raise DeclarationError(
            f"unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    if "task" not in options:
        raise DeclarationError("'task' is required")
    return replace(ScheduleSpec(name=name, task=options["task"]), **options)


def sync_declared() -> dict[str, str]:
    """Write the declarations into the schedule table. Returns the invalid ones' errors."""
    specs, invalid = declared_specs()
    for name, spec in specs.items():
        values = spec.row_values()
        errors = schedule_errors(Schedule(name=name, **values))
        if errors:
            invalid[name] = describe(errors)
            continue
        _upsert(name, values, enabled=spec.enabled)
    for name, problems in invalid.items():
        logger.error(
            "event=declared_schedule_invalid schedule=%s errors=%r action='not synced'", name, problems
        )
    keep = set(specs) | set(invalid)
    for schedule in Schedule.objects.filter(source=ScheduleSource.CODE).exclude(name__in=keep):
        schedule.delete()
        logger.warning(
            "event=declared_schedule_removed schedule=%s reason='no longer declared'", schedule.name
        )
    return invalid


def _upsert(name: str, values: dict[str, Any], *, enabled: bool) -> None:
    for _ in range(2):
        schedule = Schedule.objects.filter(name=name).first()
        if schedule is None:
            try:
                with transaction.atomic():
                    Schedule(name=name, source=ScheduleSource.CODE, enabled=enabled, **values).save()
                logger.info("event=declared_schedule_created schedule=%s", name)
                return
            except IntegrityError:
                continue  # another scheduler created it at the same moment: update that one
        if schedule.source != ScheduleSource.CODE:
            logger.warning(
                "event=declared_schedule_shadowed schedule=%s reason='a database schedule has this name'",
                name,
            )
            return
        changed = [key for key, value in values.items() if getattr(schedule, key) != value]
        if changed:
            for key in changed:
                setattr(schedule, key, values[key])
            schedule.save()
            logger.info("event=declared_schedule_updated schedule=%s fields=%s", name, ",".join(changed))
        return
