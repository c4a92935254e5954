"""The catch-up policies (jobs/scheduler/plan.py): exact counts after a simulated outage."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs.scheduler.cron import Slot, Timing
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


def hours(*offsets: int) -> list[Slot]:
    return [Slot(T0 + timedelta(hours=h)) for h in offsets]


def span(first: int, last: int) -> tuple[Slot, Slot]:
    """The (first, last) dropped slots, as hours after T0."""
    return Slot(T0 + timedelta(hours=first)), Slot(T0 + timedelta(hours=last))


def test_skip_drops_every_missed_slot() -> None:
    decided = decide("skip")
    assert decided.fire == []
    assert decided.dropped == span(1, 10)
    assert decided.next_fire_at == T0 + timedelta(hours=11)


def test_skip_still_fires_a_slot_within_the_grace() -> None:
    decided = decide("skip", now=T0 + timedelta(hours=10, seconds=45))
    assert decided.fire == hours(10)
    assert decided.dropped == span(1, 9)


def test_latest_fires_only_the_most_recent_slot() -> None:
    decided = decide("latest")
    assert decided.fire == hours(10)
    assert decided.dropped == span(1, 9)


def test_all_fires_every_slot_within_the_window() -> None:
    decided = decide("all", window=timedelta(hours=3))
    # The window reaches back to 07:30: 08:00, 09:00 and 10:00.
    assert decided.fire == hours(8, 9, 10)
    assert decided.dropped == span(1, 7)


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
    assert decided.fire == [Slot(due)]
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
    assert decided.fire[-1] == Slot(T0 + timedelta(days=30))
    assert decided.dropped == (Slot(T0), Slot(T0 + timedelta(days=30, seconds=-100)))


# --- two slots at one instant (spring forward, see cron.py) ---------------------------------

NEW_YORK_0200_0300 = Timing.parse(cron="0 2,3 * * *", zone="America/New_York")
# 2026-03-08: 02:00 EST does not exist; it fires at the change, 03:00 EDT, as does 03:00.
CHANGE = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
BOTH = [Slot(CHANGE), Slot(CHANGE, 1)]


def decide_at_the_change(catchup: str, *, now: datetime, limit: int = 100):
    return plan(
        NEW_YORK_0200_0300,
        due_from=CHANGE,
        now=now,
        catchup=catchup,
        window=timedelta(hours=3),
        grace=GRACE,
        limit=limit,
    )


@pytest.mark.parametrize("catchup", ["skip", "latest", "all"])
def test_both_slots_at_the_change_fire_on_time_whatever_the_policy(catchup: str) -> None:
    decided = decide_at_the_change(catchup, now=CHANGE + timedelta(seconds=59))
    assert decided.fire == BOTH
    assert decided.dropped is None
    assert decided.next_fire_at == datetime(2026, 3, 9, 6, 0, tzinfo=UTC)


def test_past_the_grace_skip_drops_both_slots_at_the_change() -> None:
    decided = decide_at_the_change("skip", now=CHANGE + timedelta(hours=2))
    assert decided.fire == []
    assert decided.dropped == (Slot(CHANGE), Slot(CHANGE, 1))


def test_after_an_outage_latest_and_all_fire_both_slots_at_the_change() -> None:
    for catchup in ("latest", "all"):
        decided = decide_at_the_change(catchup, now=CHANGE + timedelta(hours=2))
        assert decided.fire == BOTH, catchup
        assert decided.dropped is None


def test_the_catch_up_limit_counts_each_slot_at_the_change() -> None:
    decided = decide_at_the_change("all", now=CHANGE + timedelta(hours=2), limit=1)
    assert decided.fire == [Slot(CHANGE, 1)]
    assert decided.dropped == (Slot(CHANGE), Slot(CHANGE))


def test_latest_after_a_longer_outage_fires_only_the_most_recent_slot() -> None:
    next_day = datetime(2026, 3, 9, 7, 0, tzinfo=UTC)  # 03:00 EDT on 03-09
    decided = decide_at_the_change("latest", now=next_day + timedelta(minutes=5))
    assert decided.fire == [Slot(next_day)]
    assert decided.dropped == (Slot(CHANGE), Slot(next_day - timedelta(hours=1)))
