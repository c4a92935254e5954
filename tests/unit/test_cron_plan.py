"""The catch-up policies (jobs/scheduler/plan.py): exact counts after a simulated outage."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs.scheduler.cron import Timing
from jobs.scheduler.plan import plan

HOURLY = Timing.parse(cron="0 * * * *", zone="Europe/London")
T0 = datetime(2026, 1, 10, 0, 0, tzinfo=UTC)
# The scheduler dealt with T0's slot, then nothing ran for 10.5 hours.
NOW = T0 + timedelta(hours=10, minutes=30)
GRACE = timedelta(seconds=60)


def decide(catchup: str, *, window: timedelta = timedelta(hours=3), limit: int = 100, now: datetime = NOW):
    return plan(
        HOURLY,
        due_from=T0 + timedelta(hours=1),
        now=now,
        catchup=catchup,
        window=window,
        grace=GRACE,
        limit=limit,
    )


def hours(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(hours=h) for h in offsets]


def test_skip_drops_every_missed_slot() -> None:
    decided = decide("skip")
    assert decided.fire == []
    assert decided.dropped == (T0 + timedelta(hours=1), T0 + timedelta(hours=10))
    assert decided.next_fire_at == T0 + timedelta(hours=11)


def test_skip_still_fires_a_slot_within_the_grace() -> None:
    decided = decide("skip", now=T0 + timedelta(hours=10, seconds=45))
    assert decided.fire == hours(10)
    assert decided.dropped == (T0 + timedelta(hours=1), T0 + timedelta(hours=9))


def test_latest_fires_only_the_most_recent_slot() -> None:
    decided = decide("latest")
    assert decided.fire == hours(10)
    assert decided.dropped == (T0 + timedelta(hours=1), T0 + timedelta(hours=9))


def test_all_fires_every_slot_within_the_window() -> None:
    decided = decide("all", window=timedelta(hours=3))
    # The window reaches back to 07:30: 08:00, 09:00 and 10:00.
    assert decided.fire == hours(8, 9, 10)
    assert decided.dropped == (T0 + timedelta(hours=1), T0 + timedelta(hours=7))


def test_all_with_a_wide_window_fires_every_missed_slot() -> None:
    decided = decide("all", window=timedelta(days=1))
    assert decided.fire == hours(*range(1, 11))
    assert decided.dropped is None


def test_all_is_capped_at_the_most_recent_slots() -> None:
    decided = decide("all", window=timedelta(days=1), limit=4)
    assert decided.fire == hours(7, 8, 9, 10)


@pytest.mark.parametrize("catchup", ["skip", "latest", "all"])
def test_a_scheduler_on_time_fires_the_one_due_slot_whatever_the_policy(catchup: str) -> None:
    due = T0 + timedelta(hours=1)
    decided = decide(catchup, now=due + timedelta(milliseconds=3))
    assert decided.fire == [due]
    assert decided.dropped is None
    assert decided.next_fire_at == due + timedelta(hours=1)


def test_a_long_outage_of_a_per_second_schedule_is_planned_without_walking_every_slot() -> None:
    every_second = Timing.parse(interval=1, zone="UTC")
    decided = plan(
        every_second,
        due_from=T0,
        now=T0 + timedelta(days=30),
        catchup="all",
        window=timedelta(days=30),
        grace=GRACE,
        limit=100,
    )
    assert len(decided.fire) == 100
    assert decided.fire[-1] == T0 + timedelta(days=30)
    assert decided.dropped == (T0, T0 + timedelta(days=30, seconds=-100))
