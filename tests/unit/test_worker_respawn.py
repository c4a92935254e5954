"""The supervisor's respawn and housekeeper-health decisions (jobs/worker/children.py),
without processes."""

from __future__ import annotations

from jobs.worker.children import (
    HEALTHY_AFTER,
    HOUSEKEEPER_STUCK,
    RESPAWN_CAP,
    Streak,
    housekeeper_health,
    housekeeper_respawn_delay,
    record_death,
    worth_reporting,
)


def test_the_first_death_respawns_at_once_later_ones_back_off_up_to_the_cap() -> None:
    streak = Streak()
    assert record_death(streak, lived=1.0) == 0.0
    delays = [record_death(streak, lived=1.0) for _ in range(20)]
    assert streak.deaths == 21
    assert all(0 < delay <= RESPAWN_CAP * 1.25 for delay in delays)
    assert delays[-1] > delays[0]


def test_an_executor_that_lived_long_enough_starts_a_new_streak() -> None:
    streak = Streak(deaths=5)
    assert record_death(streak, lived=HEALTHY_AFTER) == 0.0
    assert streak.deaths == 1


def test_a_crash_loop_is_reported_at_two_four_eight_deaths() -> None:
    assert [n for n in range(1, 20) if worth_reporting(n)] == [2, 4, 8, 16]


def test_a_dead_housekeepers_first_successor_comes_at_once() -> None:
    assert housekeeper_respawn_delay(1) == 0.0
    assert 0 < housekeeper_respawn_delay(3) <= RESPAWN_CAP * 2


def test_housekeeper_health() -> None:
    inf = float("inf")
    assert (
        housekeeper_health(100.0, progress=100.0 - HOUSEKEEPER_STUCK - 1, beat_late_at=inf, started=0.0)
        == "stuck"
    )
    assert housekeeper_health(100.0, progress=100.0, beat_late_at=99.0, started=0.0) == "stalled"
    assert housekeeper_health(100.0, progress=100.0, beat_late_at=inf, started=0.0) == "healthy"
    assert housekeeper_health(100.0, progress=100.0, beat_late_at=inf, started=95.0) == "young"
