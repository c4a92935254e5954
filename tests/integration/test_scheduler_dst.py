"""Fire counts per local day around DST changes, through the whole scheduler (ticks, fire
records, jobs) with the clock moved from one wake-up to the next."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs.models import Job
from tests.integration.test_scheduler_support import fired_slots, make_schedule, run_clock, scheduler

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
