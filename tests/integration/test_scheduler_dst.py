"""Fire counts per local day around DST changes, through the whole scheduler (ticks, fire
records, jobs) with the clock moved from one wake-up to the next."""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, transaction

from jobs.models import FireOutcome, FireRecord, Job, Overlap, Schedule
from jobs.scheduler import Scheduler
from jobs.scheduler.cron import Slot, Timing
from jobs.scheduler.fire import fire_slot, run_now
from jobs.scheduler.validation import check
from tests.integration.test_scheduler_support import (
    fired,
    fired_slots,
    jobs_of,
    make_schedule,
    run_clock,
    scheduler,
    start_blocked,
    utc,
)

pytestmark = pytest.mark.django_db

EXPRESSIONS = {
    "daily-0130": "30 1 * * *",
    "daily-0215": "15 2 * * *",
    "daily-0230": "30 2 * * *",
    "hourly-00": "0 * * * *",
    "hourly-30": "30 * * * *",
}

# zone, local date of the change, expected fires that day per schedule.
CASES = [
    (
        "America/New_York",
        "2026-11-01",  # fall back 02:00 -> 01:00
        {"daily-0130": 1, "daily-0215": 1, "daily-0230": 1, "hourly-00": 25, "hourly-30": 25},
    ),
    (
        "America/New_York",
        "2026-03-08",  # spring forward 02:00 -> 03:00
        {"daily-0130": 1, "daily-0215": 1, "daily-0230": 1, "hourly-00": 23, "hourly-30": 23},
    ),
    (
        "Europe/London",
        "2026-10-25",  # fall back 02:00 -> 01:00
        {"daily-0130": 1, "daily-0215": 1, "daily-0230": 1, "hourly-00": 25, "hourly-30": 25},
    ),
    (
        "Europe/London",
        "2026-03-29",  # spring forward 01:00 -> 02:00
        {"daily-0130": 1, "daily-0215": 1, "daily-0230": 1, "hourly-00": 23, "hourly-30": 23},
    ),
    (
        "Australia/Lord_Howe",
        "2026-04-05",  # fall back 02:00 -> 01:30
        {"daily-0130": 1, "daily-0215": 1, "daily-0230": 1, "hourly-00": 24, "hourly-30": 25},
    ),
    (
        "Australia/Lord_Howe",
        "2026-10-04",  # spring forward 02:00 -> 02:30
        {"daily-0130": 1, "daily-0215": 1, "daily-0230": 1, "hourly-00": 23, "hourly-30": 24},
    ),
]


@pytest.mark.parametrize(("zone", "day", "expected"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_fires_per_local_day_around_a_dst_change(zone: str, day: str, expected: dict[str, int]) -> None:
    tz = ZoneInfo(zone)
    schedules = {name: make_schedule(name, cron=cron, time_zone=zone) for name, cron in EXPRESSIONS.items()}
    midnight = datetime.fromisoformat(day).replace(tzinfo=tz)
    run_clock(scheduler(), midnight - timedelta(days=1, minutes=1), midnight + timedelta(days=2))

    counts = {}
    for name, schedule in schedules.items():
        per_day = Counter(slot.astimezone(tz).date().isoformat() for slot in fired_slots(schedule))
        counts[name] = per_day[day]
        # The ordinary days either side are ordinary.
        previous = (midnight - timedelta(days=1)).date().isoformat()
        assert per_day[previous] == (24 if name.startswith("hourly") else 1), (name, previous)
    assert counts == expected
    # One job per fire record, no more.
    assert Job.objects.count() == sum(len(fired_slots(s)) for s in schedules.values())


def test_new_york_spring_forward_runs_the_skipped_0230_job_at_0300() -> None:
    tz = ZoneInfo("America/New_York")
    schedule = make_schedule("nightly", cron="30 2 * * *", time_zone="America/New_York")
    start = datetime(2026, 3, 7, 12, tzinfo=tz)
    run_clock(scheduler(), start, start + timedelta(days=2))
    assert [slot.astimezone(tz).strftime("%m-%d %H:%M %Z") for slot in fired_slots(schedule)] == [
        "03-08 03:00 EDT",
        "03-09 02:30 EDT",
    ]


def test_london_fall_back_runs_the_repeated_0130_job_at_its_first_occurrence() -> None:
    tz = ZoneInfo("Europe/London")
    schedule = make_schedule("nightly", cron="30 1 * * *", time_zone="Europe/London")
    start = datetime(2026, 10, 24, 12, tzinfo=tz)
    run_clock(scheduler(), start, start + timedelta(days=2))
    assert [slot.astimezone(tz).strftime("%m-%d %H:%M %Z") for slot in fired_slots(schedule)] == [
        "10-25 01:30 BST",
        "10-26 01:30 GMT",
    ]


# --- the skipped time and the first real time after the gap: two slots, one instant -----------

# zone, expression, local date clocks spring forward, the instant of the change, and the local
# fire times that day (``#1``: the second slot at one instant).
GAP_AND_NEXT = [
    # 02:00 EST is skipped and fires at the change, 03:00 EDT, which is 03:00's own time.
    ("America/New_York", "0 2,3 * * *", "2026-03-08", utc("2026-03-08T07:00:00"), ["03:00", "03:00#1"]),
    # 01:00 GMT is skipped and fires at 02:00 BST, which 02:00 also fires at.
    (
        "Europe/London",
        "0 1-4 * * *",
        "2026-03-29",
        utc("2026-03-29T01:00:00"),
        ["02:00", "02:00#1", "03:00", "04:00"],
    ),
    # The half-hour shift: 02:00 is skipped and fires at 02:30, 02:30's own time.
    ("Australia/Lord_Howe", "0,30 2 * * *", "2026-10-04", utc("2026-10-03T15:30:00"), ["02:30", "02:30#1"]),
]
GAP_IDS = [case[0] for case in GAP_AND_NEXT]
NEW_YORK, NEW_YORK_CRON, _, CHANGE, _ = GAP_AND_NEXT[0]
BOTH = [Slot(CHANGE), Slot(CHANGE, 1)]


def local_times(slots: list[Slot], zone: str) -> list[str]:
    tz = ZoneInfo(zone)
    return [slot.at.astimezone(tz).strftime("%H:%M") + (f"#{slot.seq}" if slot.seq else "") for slot in slots]


def on_day(slots: list[Slot], zone: str, day: str) -> list[Slot]:
    return [slot for slot in slots if slot.at.astimezone(ZoneInfo(zone)).date().isoformat() == day]


@pytest.mark.parametrize(("zone", "cron", "day", "change", "expected"), GAP_AND_NEXT, ids=GAP_IDS)
def test_the_skipped_time_and_the_first_real_time_after_the_gap_both_fire(
    zone: str, cron: str, day: str, change: datetime, expected: list[str]
) -> None:
    schedule = make_schedule("gap", cron=cron, time_zone=zone)
    midnight = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone))
    run_clock(scheduler(), midnight - timedelta(days=1, minutes=1), midnight + timedelta(days=2))
    assert local_times(on_day(fired(schedule), zone, day), zone) == expected
    assert [slot for slot in fired(schedule) if slot.at == change] == [Slot(change), Slot(change, 1)]
    # Every fire record has its own job, the second slot at the change included.
    assert len(jobs_of(schedule)) == len(fired(schedule)) == FireRecord.objects.count() == Job.objects.count()


@pytest.mark.parametrize(
    ("catchup", "late", "expected"),
    [
        ("skip", timedelta(seconds=59), BOTH),  # within the misfire grace: on time
        ("skip", timedelta(hours=2), []),
        ("latest", timedelta(hours=2), BOTH),  # one moment, not a backlog
        ("all", timedelta(hours=2), BOTH),
    ],
)
def test_catch_up_policies_count_the_slots_at_the_change_one_each(
    catchup: str, late: timedelta, expected: list[Slot]
) -> None:
    schedule = make_schedule(
        "gap", cron=NEW_YORK_CRON, time_zone=NEW_YORK, catchup=catchup, catchup_window=3 * 3600
    )
    runner = scheduler(grace=60)
    runner.tick(now=CHANGE - timedelta(hours=3))
    runner.tick(now=CHANGE + late)
    assert fired(schedule) == expected
    assert len(jobs_of(schedule)) == len(expected)
    schedule.refresh_from_db()
    assert schedule.next_fire_at == utc("2026-03-09T06:00:00")  # 02:00 EDT the next day
    assert schedule.last_fired_at == (CHANGE if expected else None)


def test_the_catch_up_limit_keeps_the_later_slot_at_the_change() -> None:
    schedule = make_schedule(
        "gap", cron=NEW_YORK_CRON, time_zone=NEW_YORK, catchup="all", catchup_window=3 * 3600
    )
    runner = scheduler(catchup_limit=1)
    runner.tick(now=CHANGE - timedelta(hours=3))
    runner.tick(now=CHANGE + timedelta(hours=2))
    assert fired(schedule) == [Slot(CHANGE, 1)]


def test_a_scheduler_that_fired_only_the_first_slot_at_the_change_leaves_the_second_to_the_next() -> None:
    schedule = make_schedule("gap", cron=NEW_YORK_CRON, time_zone=NEW_YORK)
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=CHANGE)
    schedule.refresh_from_db()
    # A scheduler fired (change, 0) and stopped before the second slot and the advance.
    assert fire_slot(schedule, check(schedule).task, Slot(CHANGE), now=CHANGE).outcome == FireOutcome.ENQUEUED
    scheduler().tick(now=CHANGE + timedelta(seconds=1))
    assert fired(schedule) == BOTH
    assert len(jobs_of(schedule)) == 2


def test_overlap_skip_applies_to_the_second_slot_at_the_change_like_any_other() -> None:
    schedule = make_schedule("gap", cron=NEW_YORK_CRON, time_zone=NEW_YORK, overlap=Overlap.SKIP)
    run_clock(scheduler(), CHANGE - timedelta(hours=3), CHANGE + timedelta(hours=1))
    records = FireRecord.objects.filter(schedule=schedule).order_by("slot", "slot_seq")
    # The first slot's job is still queued when the second slot comes up.
    assert [(r.slot, r.slot_seq, r.outcome) for r in records] == [
        (CHANGE, 0, FireOutcome.ENQUEUED),
        (CHANGE, 1, FireOutcome.SKIPPED_OVERLAP),
    ]


def test_run_now_at_the_change_takes_neither_slot() -> None:
    schedule = make_schedule("gap", cron=NEW_YORK_CRON, time_zone=NEW_YORK)
    manual = run_now(schedule, now=CHANGE)
    assert manual.slot == Slot(CHANGE)
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=CHANGE)
    scheduler().tick(now=CHANGE)
    assert fired(schedule) == BOTH
    assert FireRecord.objects.filter(schedule=schedule, manual=True).count() == 1
    assert len(jobs_of(schedule)) == 3


# --- two schedulers at once, real concurrency (each thread has its own connection) --------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("zone", "cron", "day", "change", "expected"), GAP_AND_NEXT, ids=GAP_IDS)
def test_a_second_scheduler_ticking_the_same_slots_at_once_fires_neither_again(
    zone: str, cron: str, day: str, change: datetime, expected: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    schedule = make_schedule("gap", cron=cron, time_zone=zone)
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=change)
    first, second = scheduler(), scheduler()
    with caplog.at_level(logging.DEBUG, logger="jobs.scheduler"), ThreadPoolExecutor(max_workers=1) as pool:
        with transaction.atomic():
            # The first scheduler has fired both slots and not committed yet; the second
            # reads the schedule as it was and tries the same two slots.
            first.tick(now=change)
            ticking = start_blocked(pool, lambda: second.tick(now=change))
        ticking.result(timeout=30)
    assert fired(schedule) == [Slot(change), Slot(change, 1)]
    assert Job.objects.count() == 2
    taken = [r.getMessage() for r in caplog.records if "event=slot_taken" in r.getMessage()]
    assert len(taken) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("zone", "cron", "day", "change", "expected"), GAP_AND_NEXT, ids=GAP_IDS)
def test_two_schedulers_running_through_the_change_day_together_fire_each_slot_once(
    zone: str, cron: str, day: str, change: datetime, expected: list[str]
) -> None:
    gap = make_schedule("gap", cron=cron, time_zone=zone)
    busy = make_schedule("busy", cron="*/15 * * * *", time_zone=zone)
    midnight = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone))
    start, end = midnight - timedelta(minutes=1), midnight + timedelta(days=1)

    def run(runner: Scheduler) -> None:
        try:
            run_clock(runner, start, end)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(run, scheduler()) for _ in range(2)]:
            done.result(timeout=300)
    assert local_times(on_day(fired(gap), zone, day), zone) == expected
    every_quarter = Timing.parse(cron="*/15 * * * *", zone=zone).between(start, end)
    assert fired(busy) == every_quarter
    assert Job.objects.count() == FireRecord.objects.count() == len(fired(gap)) + len(fired(busy))
