"""Cron and interval math, and the DST policy documented in jobs/scheduler/cron.py."""

from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from jobs.scheduler.cron import InvalidTiming, Slot, Timing

NEW_YORK = "America/New_York"
LONDON = "Europe/London"
LORD_HOWE = "Australia/Lord_Howe"

# (zone, the local date clocks fall back, the local date clocks spring forward) in 2026.
DST_DAYS = [
    (NEW_YORK, "2026-11-01", "2026-03-08"),  # 02:00 -> 01:00 / 02:00 -> 03:00
    (LONDON, "2026-10-25", "2026-03-29"),  # 02:00 -> 01:00 / 01:00 -> 02:00
    (LORD_HOWE, "2026-04-05", "2026-10-04"),  # 02:00 -> 01:30 / 02:00 -> 02:30
]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(text: str, zone: str, fold: int = 0) -> datetime:
    """A local time as a UTC instant (aware times in a repeated hour never compare equal
    across zones, PEP 495)."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


def fires_on(timing: Timing, day: str) -> list[Slot]:
    """The slots whose local date (in the schedule's zone) is ``day``."""
    zone = timing.zone
    start = datetime.fromisoformat(day).replace(tzinfo=zone) - timedelta(days=1)
    slots = timing.between(start, start + timedelta(days=3))
    return [slot for slot in slots if slot.at.astimezone(zone).date().isoformat() == day]


def instants(slots: list[Slot]) -> list[datetime]:
    return [slot.at for slot in slots]


def wall(slots: list[Slot], zone: str) -> list[str]:
    """Local fire times; a second slot at the same instant is marked ``#1``."""
    return [
        slot.at.astimezone(ZoneInfo(zone)).strftime("%H:%M%z") + (f"#{slot.seq}" if slot.seq else "")
        for slot in slots
    ]


# --- fixed intervals ------------------------------------------------------------------


def test_interval_slots_are_anchored_on_the_epoch_in_utc() -> None:
    timing = Timing.parse(interval=600, zone=NEW_YORK)
    assert timing.next_after(utc("2026-03-08T06:55:01")) == utc("2026-03-08T07:00:00")
    # A slot is not "after" itself.
    assert timing.next_after(utc("2026-03-08T07:00:00")) == utc("2026-03-08T07:10:00")
    # The zone plays no part: across the spring-forward change they stay 600 s apart.
    slots = instants(timing.between(utc("2026-03-08T06:00:00"), utc("2026-03-08T08:00:00")))
    assert len(slots) == 13
    assert {b - a for a, b in pairwise(slots)} == {timedelta(seconds=600)}


def test_interval_of_one_second() -> None:
    timing = Timing.parse(interval=1, zone="UTC")
    assert timing.next_after(utc("2026-01-01T00:00:00.250000")) == utc("2026-01-01T00:00:01")
    assert len(timing.between(utc("2026-01-01T00:00:00"), utc("2026-01-01T00:01:00"))) == 61


# --- cron in a zone ---------------------------------------------------------------------


def test_cron_is_read_in_the_schedules_zone() -> None:
    timing = Timing.parse(cron="0 9 * * 1-5", zone="Asia/Jakarta")
    # Friday 2026-01-02 09:00 WIB is 02:00 UTC; then Monday.
    assert instants(timing.upcoming(utc("2026-01-01T03:00:00"), 2)) == [
        utc("2026-01-02T02:00:00"),
        utc("2026-01-05T02:00:00"),
    ]


def test_six_fields_put_seconds_last() -> None:
    timing = Timing.parse(cron="*/5 * * * * 30", zone="UTC")
    assert instants(timing.upcoming(utc("2026-01-01T00:00:00"), 2)) == [
        utc("2026-01-01T00:00:30"),
        utc("2026-01-01T00:05:30"),
    ]


# --- the DST policy, fire counts per local day ----------------------------------------------


@pytest.mark.parametrize(("zone", "fall_back", "spring_forward"), DST_DAYS)
def test_a_daily_job_fires_once_on_both_change_days(zone: str, fall_back: str, spring_forward: str) -> None:
    for expression in ("30 1 * * *", "45 1 * * *", "15 2 * * *", "30 2 * * *"):
        timing = Timing.parse(cron=expression, zone=zone)
        for day in (fall_back, spring_forward):
            assert len(fires_on(timing, day)) == 1, (expression, day)


@pytest.mark.parametrize(
    ("zone", "expression", "day", "expected"),
    [
        # Fall back: the repeated local time fires at its first occurrence (summer offset).
        (NEW_YORK, "30 1 * * *", "2026-11-01", ["01:30-0400"]),
        (LONDON, "30 1 * * *", "2026-10-25", ["01:30+0100"]),
        (LORD_HOWE, "45 1 * * *", "2026-04-05", ["01:45+1100"]),
        # Spring forward: a time inside the gap fires at the first instant after it.
        (NEW_YORK, "30 2 * * *", "2026-03-08", ["03:00-0400"]),
        (LONDON, "30 1 * * *", "2026-03-29", ["02:00+0100"]),
        (LORD_HOWE, "15 2 * * *", "2026-10-04", ["02:30+1100"]),
        # Several slots in one gap fold into that one instant; the rest fire as usual.
        (NEW_YORK, "*/20 2 * * *", "2026-03-08", ["03:00-0400"]),
        (LORD_HOWE, "*/20 2 * * *", "2026-10-04", ["02:30+1100", "02:40+1100"]),
        # And on an ordinary day nothing changes.
        (NEW_YORK, "30 2 * * *", "2026-03-09", ["02:30-0400"]),
    ],
)
def test_wall_clock_slots_around_the_change(
    zone: str, expression: str, day: str, expected: list[str]
) -> None:
    assert wall(fires_on(Timing.parse(cron=expression, zone=zone), day), zone) == expected


@pytest.mark.parametrize(
    ("zone", "expression", "fall_back_count", "spring_forward_count"),
    [
        (NEW_YORK, "0 * * * *", 25, 23),
        (NEW_YORK, "30 * * * *", 25, 23),
        (LONDON, "0 * * * *", 25, 23),
        (LONDON, "30 * * * *", 25, 23),
        # Half-hour shifts: only the minutes that fall in the repeated or skipped half hour
        # gain or lose a run.
        (LORD_HOWE, "0 * * * *", 24, 23),
        (LORD_HOWE, "30 * * * *", 25, 24),
        (NEW_YORK, "*/15 * * * *", 25 * 4, 23 * 4),
    ],
)
def test_hourly_jobs_follow_real_elapsed_time(
    zone: str, expression: str, fall_back_count: int, spring_forward_count: int
) -> None:
    _, fall_back, spring_forward = next(d for d in DST_DAYS if d[0] == zone)
    timing = Timing.parse(cron=expression, zone=zone)
    assert len(fires_on(timing, fall_back)) == fall_back_count
    assert len(fires_on(timing, spring_forward)) == spring_forward_count


@pytest.mark.parametrize(("zone", "fall_back", "spring_forward"), DST_DAYS[:2])
def test_hourly_runs_stay_one_real_hour_apart(zone: str, fall_back: str, spring_forward: str) -> None:
    timing = Timing.parse(cron="0 * * * *", zone=zone)
    for day in (fall_back, spring_forward):
        slots = instants(fires_on(timing, day))
        assert {b - a for a, b in pairwise(slots)} == {timedelta(hours=1)}


def test_lord_howe_hourly_spans_the_half_hour_shift() -> None:
    timing = Timing.parse(cron="0 * * * *", zone=LORD_HOWE)
    slots = fires_on(timing, "2026-04-05")
    assert wall(slots[:4], LORD_HOWE) == ["00:00+1100", "01:00+1100", "02:00+1030", "03:00+1030"]
    gaps = Counter(b - a for a, b in pairwise(instants(slots)))
    assert gaps == {timedelta(hours=1): 22, timedelta(minutes=90): 1}


def test_every_second_through_the_repeated_hour_counts_real_seconds() -> None:
    timing = Timing.parse(cron="* * * * * *", zone=NEW_YORK)
    # 05:00-07:00 UTC spans the repeated 01:00-02:00 local hour: 7200 real seconds.
    assert len(timing.between(utc("2026-11-01T05:00:00"), utc("2026-11-01T06:59:59"))) == 7200


def test_next_after_from_inside_the_second_pass_of_the_repeated_hour() -> None:
    timing = Timing.parse(cron="30 1 * * *", zone=NEW_YORK)
    second_pass = local("2026-11-01T01:10", NEW_YORK, fold=1)
    assert timing.next_after(second_pass) == local("2026-11-02T01:30", NEW_YORK)
    first_pass = local("2026-11-01T01:10", NEW_YORK, fold=0)
    assert timing.next_after(first_pass) == local("2026-11-01T01:30", NEW_YORK, fold=0)


def test_after_a_gap_slot_the_next_is_the_following_day() -> None:
    timing = Timing.parse(cron="30 2 * * *", zone=NEW_YORK)
    fired = timing.next_after(utc("2026-03-08T05:00:00"))
    assert fired == local("2026-03-08T03:00", NEW_YORK)
    assert timing.next_after(fired) == local("2026-03-09T02:30", NEW_YORK)


# --- the skipped time and the first real time after the gap are two slots ------------------

# zone, expression, local date clocks spring forward, local fire times that day.
GAP_AND_NEXT = [
    # 02:00 is skipped and fires at the change, 03:00 EDT, which is also 03:00's own time.
    (NEW_YORK, "0 2,3 * * *", "2024-03-10", ["03:00-0400", "03:00-0400#1"]),
    (NEW_YORK, "0 2,3 * * *", "2026-03-08", ["03:00-0400", "03:00-0400#1"]),
    (LONDON, "0 1-4 * * *", "2024-03-31", ["02:00+0100", "02:00+0100#1", "03:00+0100", "04:00+0100"]),
    (LONDON, "0 1-4 * * *", "2026-03-29", ["02:00+0100", "02:00+0100#1", "03:00+0100", "04:00+0100"]),
    # The half-hour shift: 02:00 is skipped and fires at 02:30, which is 02:30's own time.
    (LORD_HOWE, "0,30 2 * * *", "2026-10-04", ["02:30+1100", "02:30+1100#1"]),
    (LORD_HOWE, "0,30 2 * * *", "2024-10-06", ["02:30+1100", "02:30+1100#1"]),
    # Several skipped times still fold into one slot; the real 03:00 is the next.
    (NEW_YORK, "*/20 2,3 * * *", "2026-03-08", ["03:00-0400", "03:00-0400#1", "03:20-0400", "03:40-0400"]),
]


@pytest.mark.parametrize(("zone", "expression", "day", "expected"), GAP_AND_NEXT)
def test_a_skipped_time_does_not_swallow_the_first_real_time_after_the_gap(
    zone: str, expression: str, day: str, expected: list[str]
) -> None:
    timing = Timing.parse(cron=expression, zone=zone)
    midnight = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone))
    assert len(timing.between(midnight, midnight + timedelta(hours=23))) == len(expected)
    assert wall(fires_on(timing, day), zone) == expected


@pytest.mark.parametrize(("zone", "expression", "day", "expected"), GAP_AND_NEXT)
def test_the_slots_at_the_change_are_the_same_wherever_the_walk_starts(
    zone: str, expression: str, day: str, expected: list[str]
) -> None:
    timing = Timing.parse(cron=expression, zone=zone)
    [change] = {slot.at for slot in fires_on(timing, day) if slot.seq}
    pair = [Slot(change), Slot(change, 1)]
    assert timing.between(change, change) == pair
    assert [s for s in timing.between(change - timedelta(days=9), change) if s.at == change] == pair
    assert timing.upcoming(change - timedelta(microseconds=1), 2) == pair
    # Both are behind a walk that starts at the change itself.
    assert next(timing.slots(change)).at > change
    assert timing.next_after(change - timedelta(microseconds=1)) == change
    # Looking back finds the later one first.
    assert timing.latest(change, change, 1) == [Slot(change, 1)]
    assert timing.latest(change - timedelta(days=1), change, 1, before=Slot(change, 1)) == [Slot(change)]


# --- looking back ---------------------------------------------------------------------


def test_latest_returns_the_most_recent_slots_oldest_first() -> None:
    timing = Timing.parse(interval=1, zone="UTC")
    start, end = utc("2026-01-01T00:00:00"), utc("2026-01-08T00:00:00")
    assert instants(timing.latest(start, end, 3)) == [
        end - timedelta(seconds=2),
        end - timedelta(seconds=1),
        end,
    ]
    daily = Timing.parse(cron="0 3 * * *", zone="UTC")
    assert instants(daily.latest(start, end, 2)) == [utc("2026-01-06T03:00:00"), utc("2026-01-07T03:00:00")]
    assert daily.latest(utc("2026-01-01T04:00:00"), utc("2026-01-02T02:00:00"), 1) == []


# --- rejected input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "* * * *"}, "invalid cron expression '* * * *': it has 4 fields; use five "),
        (
            {"cron": "0 0 * * * * 2030"},
            "it has 7 fields; use five \\(minute hour day month weekday\\), or six",
        ),
        (
            {"cron": "@reboot"},
            "the nicknames are @yearly, @monthly, @weekly, @daily and @hourly; or use five",
        ),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "0 3 * * *", "interval": 60}, "not both: clear one of them"),
        ({}, "the schedule has neither"),
        ({"interval": 0}, "at least 1"),
        ({"interval": 1.5}, "whole number"),
    ],
)
def test_invalid_timings_say_what_is_wrong(options: dict, message: str) -> None:
    with pytest.raises(InvalidTiming, match=message.replace("*", r"\*")):
        Timing.parse(zone="UTC", **options)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "../etc/passwd", "EST5EDT6"])
def test_unknown_time_zones_are_rejected(zone: str) -> None:
    with pytest.raises(InvalidTiming, match="time zone"):
        Timing.parse(cron="0 3 * * *", zone=zone)
