"""When a schedule fires: cron expressions and fixed intervals, in a time zone. Pure math.

A *slot* is one firing of a schedule: the UTC instant at which it fires, and its place
(``seq``) among the slots that fire at that same instant, which only the spring-forward
case below ever needs. The scheduler stores both in the fire record, so every process that
computes the slots of a schedule computes the same ones.

Fixed intervals are anchored on the Unix epoch and ignore the time zone: ``interval=3600``
fires at every whole hour of UTC, 3600 real seconds apart, whatever the clocks do. Use a
cron expression for wall-clock times.

Cron expressions (croniter syntax: five fields, or six with the *seconds last*) are read in
the schedule's IANA time zone. Around daylight-saving changes:

* **Wall-clock schedules** (those that name particular hours, e.g. ``30 1 * * *``) fire
  once per matching local time. A local time that happens twice when clocks fall back fires
  at its first occurrence only: a daily 01:30 runs once, not twice. A local time that does
  not exist when clocks spring forward fires once, at the first instant after the gap (the
  moment of the change): a daily 02:30 in New York runs at 03:00 EDT that day. Several
  slots inside one gap fold into that single slot. The first local time after the gap is
  also the moment of the change; if it matches too, it is a slot of its own at the same
  instant, one ``seq`` later: ``0 2,3 * * *`` in New York runs twice at 03:00 EDT that day,
  once for 02:00 and once for 03:00, and ``0,30 2 * * *`` in Lord Howe twice at 02:30.
* **Schedules that fire in every hour** (hour field ``*``, e.g. ``0 * * * *`` or
  ``*/5 * * * *``) follow real elapsed time: they fire at every real instant whose local
  time matches. The repeated hour fires again (an hourly job runs 25 times that day in New
  York) and the skipped hour does not fire at all (23 times), so consecutive runs stay one
  real hour apart. Where the shift is 30 minutes (Australia/Lord_Howe) the matching
  instants are 30 or 90 minutes apart across the change.

croniter 7 handles neither case as above when given aware datetimes (it fires a daily
01:30 twice on the fall-back day), so it is only ever given naive local wall times here,
where its arithmetic is exact, and the mapping to real instants is done in this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..exceptions import JobsError

# croniter is imported where an expression is read, not here: importing it runs `file` on the
# interpreter (platform.architecture()), about 16 ms of the start of every process that loads
# the apps (workers, web), which mostly never read one.

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
# Zone offsets never change twice within this span, so stepping by it finds every change.
_TRANSITION_STEP = timedelta(days=1)
# Looking further than this for a next slot means the expression (practically) never fires.
_HORIZON = timedelta(days=5 * 366)


class InvalidTiming(JobsError):
    """A cron expression, interval or time zone that cannot be scheduled."""


# The help text's count of a cron expression's fields (croniter would also read seven).
CRON_FIELDS = "five (minute hour day month weekday), or six with seconds last"


def neither_or_both(*, has_cron: bool, has_interval: bool) -> str | None:
    """What is wrong when a timing has neither a cron expression nor an interval, or both."""
    if has_cron == has_interval:
        if has_cron:
            return "Enter a cron expression or an interval in seconds, not both: clear one of them."
        return "Enter a cron expression or an interval in seconds: the schedule has neither."
    return None


def zone_named(name: str) -> ZoneInfo:
    """The IANA zone called ``name``, or InvalidTiming saying why not."""
    if not name or not isinstance(name, str):
        raise InvalidTiming("a time zone is required (an IANA name such as 'Europe/London')")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidTiming(f"unknown time zone {name!r}; use an IANA name such as 'Asia/Jakarta'") from exc


@dataclass(frozen=True, order=True)
class Slot:
    """One firing of a schedule: ``at`` is the instant (UTC); ``seq`` counts the slots
    before this one at the same instant (0 but for the first local time after a
    spring-forward gap whose skipped times fired at that instant too)."""

    at: datetime
    seq: int = 0

    def __str__(self) -> str:
        return self.at.isoformat() + (f"#{self.seq}" if self.seq else "")


@dataclass(frozen=True)
class Timing:
    """Either a cron expression read in ``zone`` or an interval of whole seconds."""

    zone: ZoneInfo
    cron: str | None = None
    interval: int | None = None
    # Whether the cron expression fires in every hour of the day (see the module docstring).
    every_hour: bool = field(default=False, compare=False)

    @classmethod
    def parse(cls, *, cron: str | None = None, interval: int | None = None, zone: str | ZoneInfo) -> Timing:
        """Check and build a timing; raises InvalidTiming with a message for a person."""
        tz = zone if isinstance(zone, ZoneInfo) else zone_named(zone)
        cron = (cron or "").strip() or None
        wrong = neither_or_both(has_cron=cron is not None, has_interval=interval is not None)
        if wrong:
            raise InvalidTiming(wrong)
        if interval is not None:
            if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
                raise InvalidTiming("the interval must be a whole number of seconds, at least 1")
            return cls(zone=tz, interval=interval)
        assert cron is not None
        from croniter import CroniterError, croniter

        # Counted here: croniter's own message asks for "5, 6 or 7 columns". A nickname
        # such as @daily is one word that croniter expands to five fields.
        count = len(cron.split())
        nickname = count == 1 and cron.startswith("@")
        if not nickname and count not in (5, 6):
            raise InvalidTiming(
                f"invalid cron expression {cron!r}: it has {count} field{'' if count == 1 else 's'}; "
                f"use {CRON_FIELDS}"
            )
        try:
            expanded = croniter(cron).expanded
        except (CroniterError, ValueError, KeyError) as exc:
            if nickname:
                raise InvalidTiming(
                    f"invalid cron expression {cron!r}: the nicknames are @yearly, @monthly, @weekly, "
                    f"@daily and @hourly; or use {CRON_FIELDS}"
                ) from exc
            raise InvalidTiming(f"invalid cron expression {cron!r}: {exc}") from exc
        hours = expanded[1]
        timing = cls(zone=tz, cron=cron, every_hour=hours == ["*"] or set(hours) == set(range(24)))
        try:
            timing.next_after(datetime.now(UTC))
        except (CroniterError, ValueError, OverflowError) as exc:
            raise InvalidTiming(f"cron expression {cron!r} never fires: {exc}") from exc
        return timing

    def describe(self) -> str:
        if self.interval is not None:
            return f"every {self.interval}s"
        return f"cron {self.cron!r} in {self.zone.key}"

    # --- slots ----------------------------------------------------------------------

    def next_after(self, t: datetime) -> datetime:
        """The instant of the first slot strictly after ``t`` (an aware datetime), in UTC."""
        t = t.astimezone(UTC)
        if self.interval is not None:
            step = self.interval * 1_000_000
            elapsed = (t - EPOCH) // _MICROSECOND
            return EPOCH + timedelta(microseconds=(elapsed // step + 1) * step)
        if self.every_hour:
            return self._next_elapsed(t)
        return next(self._wall_clock_slots(t)).at

    def slots(self, after: datetime) -> Iterator[Slot]:
        """Slots whose instant is strictly after ``after``, in order, without end."""
        if self.cron is not None and not self.every_hour:
            yield from self._wall_clock_slots(after.astimezone(UTC))
            return
        # Intervals and elapsed-time cron never fire twice at one instant.
        at = self.next_after(after)
        while True:
            yield Slot(at)
            at = self.next_after(at)

    def upcoming(self, after: datetime, count: int) -> list[Slot]:
        slots = self.slots(after)
        return [next(slots) for _ in range(count)]

    def between(self, start: datetime, end: datetime) -> list[Slot]:
        """Every slot with ``start <= instant <= end``."""
        found = []
        for slot in self.slots(start - _MICROSECOND):
            if slot.at > end:
                break
            found.append(slot)
        return found

    def latest(self, start: datetime, end: datetime, count: int, *, before: Slot | None = None) -> list[Slot]:
        """The last ``count`` slots with ``start <= instant <= end`` (and, given ``before``,
        earlier than that slot), oldest first.

        Looks back from ``end`` in growing steps, so that a long outage of a schedule that
        fires every second does not mean walking every slot since ``start``.
        """
        if count < 1 or start > end:
            return []
        lookback = timedelta(minutes=1)
        while True:
            low = max(start, end - lookback)
            found = [slot for slot in self.between(low, end) if before is None or slot < before]
            if len(found) >= count or low == start:
                return found[-count:]
            lookback *= 4

    # --- cron, wall clock -------------------------------------------------------------

    def _wall_clock_slots(self, t: datetime) -> Iterator[Slot]:
        # Every matching local time maps to one instant (first occurrence, or the end of a
        # gap) and the mapping never goes backwards, so the slots after t come from the
        # matching local times after t's own that map past t. Local times in the second pass
        # of a repeated hour map to their first pass, before t, and are stepped over. The
        # local times of one gap all map to the moment of the change and fold into one
        # slot; the local time right after the gap maps there too and is the next seq.
        wall = _wall(t, self.zone)
        horizon = wall + _HORIZON
        previous: Slot | None = None
        for local in self._matches(wall):
            if local > horizon:
                raise InvalidTiming(f"cron expression {self.cron!r} does not fire within five years")
            instant, skipped = self._instant_of(local)
            if instant <= t:
                continue
            if previous is None or instant != previous.at:
                slot = Slot(instant)
            elif skipped:
                continue
            else:
                slot = Slot(instant, previous.seq + 1)
            yield slot
            previous, horizon = slot, local + _HORIZON

    def _instant_of(self, local: datetime) -> tuple[datetime, bool]:
        """The instant a matching local time fires at, and whether that local time was
        skipped (lies in a gap)."""
        first = local.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        if _wall(first, self.zone) == local:
            return first, False  # exists; when it exists twice, fold=0 is the first occurrence
        # In a gap: fold=0 reads it with the offset before the change, fold=1 with the one
        # after, so the change itself lies between the two readings.
        second = local.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        change = _offset_change(self.zone, min(first, second), max(first, second))
        assert change is not None
        return change, True

    # --- cron, elapsed time ------------------------------------------------------------

    def _next_elapsed(self, t: datetime) -> datetime:
        # Within a stretch of constant UTC offset, local time is UTC plus the offset, so the
        # next match is croniter's next local time minus the offset. If the offset changes
        # before that, no match lies before the change: start again from the change, with
        # the new offset, the change instant itself included.
        start, inclusive = t, False
        horizon = t + _HORIZON
        while start <= horizon:
            offset = start.astimezone(self.zone).utcoffset()
            assert offset is not None
            local = (start + offset).replace(tzinfo=None)
            if inclusive:
                local -= _MICROSECOND
            candidate = (next(self._matches(local)) - offset).replace(tzinfo=UTC)
            change = _offset_change(self.zone, start, candidate)
            if change is None:
                return candidate
            start, inclusive = change, True
        raise InvalidTiming(f"cron expression {self.cron!r} does not fire within five years")

    def _matches(self, local: datetime) -> Iterator[datetime]:
        """Matching naive local times strictly after ``local``."""
        from croniter import croniter

        it = croniter(self.cron, local)
        while True:
            yield it.get_next(datetime)


def _wall(t: datetime, zone: ZoneInfo) -> datetime:
    return t.astimezone(zone).replace(tzinfo=None, fold=0)


def _offset_change(zone: ZoneInfo, start: datetime, end: datetime) -> datetime | None:
    """The first instant in (start, end] whose UTC offset differs from start's, if any."""
    before = start.astimezone(zone).utcoffset()
    low = start
    while low < end:
        high = min(low + _TRANSITION_STEP, end)
        if high.astimezone(zone).utcoffset() != before:
            # Offsets change on whole seconds; narrow (low, high] down to one.
            while high - low > _SECOND:
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == before:
                    low = middle
                else:
                    high = middle
            whole = EPOCH + timedelta(seconds=(high - EPOCH) // _SECOND)
            return whole if whole > low else high
        low = high
    return None
