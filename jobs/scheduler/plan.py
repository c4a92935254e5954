"""Which due slots of a schedule fire now: the catch-up policies. Pure; time is passed in.

A slot is *due* once it is at or before now and no scheduler has dealt with it yet (it is
at or after the schedule's ``next_fire_at``). It is *on time* while it is at most the
misfire grace old, and *missed* after that, e.g. because no scheduler ran:

* ``skip``: on-time slots fire, missed ones are dropped.
* ``latest``: only the most recent due slot fires, however old; the rest are dropped.
  A daily report after a week's outage runs once. Slots that share an instant (cron.py,
  spring forward) fire together: they are one moment, not a backlog.
* ``all``: every due slot no older than ``max(window, grace)`` fires, oldest first, at most
  ``limit`` of them (the most recent ones).

Whatever fires, the next slot to deal with is the first one after now. Slots that share an
instant are due together; ``limit`` counts them one each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .cron import Slot, Timing

_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Plan:
    fire: list[Slot]
    # The due slots that do not fire: (first, last), or None.
    dropped: tuple[Slot, Slot] | None
    next_fire_at: datetime


def plan(
    timing: Timing,
    *,
    due_from: datetime,
    now: datetime,
    catchup: str,
    window: timedelta,
    grace: timedelta,
    limit: int,
) -> Plan:
    next_fire_at = timing.next_after(now)
    if due_from > now:
        return Plan(fire=[], dropped=None, next_fire_at=due_from)
    if catchup == "latest":
        recent = timing.latest(due_from, now, 1)
        fire = timing.between(recent[0].at, recent[0].at) if recent else []
    elif catchup == "all":
        fire = timing.latest(max(due_from, now - max(window, grace)), now, limit)
    else:
        fire = timing.latest(max(due_from, now - grace), now, limit)
    return Plan(fire=fire, dropped=_dropped(timing, due_from, now, fire), next_fire_at=next_fire_at)


def _dropped(timing: Timing, due_from: datetime, now: datetime, fire: list[Slot]) -> tuple[Slot, Slot] | None:
    """The first and last due slot that does not fire. What fires is always the most recent
    due slots, so what does not is everything before them; only its ends are computed,
    since after a long outage a schedule that fires every second has far too many to list."""
    end, before = (fire[0].at, fire[0]) if fire else (now, None)
    last = timing.latest(due_from, end, 1, before=before)
    if not last:
        return None
    return next(timing.slots(due_from - _TICK)), last[0]
