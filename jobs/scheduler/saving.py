"""What saving a schedule means to the scheduler: its next fire time when its timing
changed, and a wake-up for the running schedulers. ``Schedule.save()`` calls these, so
every way of saving (the console, ``manage.py jobs``, the declared schedules' sync, an
application's own code) keeps the scheduler in step."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import connections
from django.utils import timezone

from ..store import schedules
from .cron import InvalidTiming, Timing

if TYPE_CHECKING:
    from ..models import Schedule


def next_fire_at(schedule: Schedule, *, now: datetime | None = None) -> datetime | None:
    """The first slot of ``schedule``'s timing after ``now``, or None if its timing is not
    valid (clean() reports why; a schedule saved without it never fires)."""
    try:
        timing = Timing.parse(cron=schedule.cron, interval=schedule.interval_seconds, zone=schedule.time_zone)
    except InvalidTiming:
        return None
    return timing.next_after(now or timezone.now())


def wake_schedulers(*, name: str, using: str = "default") -> None:
    """NOTIFY the schedulers that schedule ``name`` changed; sent when the transaction
    commits, like the save it follows."""
    with connections[using].cursor() as cursor:
        schedules.notify_changed(cursor, name=name)
