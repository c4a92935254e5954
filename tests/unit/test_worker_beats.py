"""The lease extensions' clock (jobs/worker/beats.py), as arithmetic: no processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.worker.beats import (
    BEAT_LATE_AFTER,
    MAX_HEARTBEAT_INTERVAL,
    beat_late_after,
    heartbeat_interval,
    late_at,
    monotonic_at,
)


def test_a_beat_every_third_of_the_shortest_lease_at_most_the_cap() -> None:
    assert heartbeat_interval(6.0) == 2.0
    assert heartbeat_interval(300.0) == MAX_HEARTBEAT_INTERVAL


def test_an_extension_is_late_one_and_a_half_intervals_after_the_last() -> None:
    assert late_at(100.0, 2.0) == 100.0 + BEAT_LATE_AFTER * 2.0
    # Half a lease is left for a successor: the last beat plus 1.5 thirds of the lease.
    lease = 30.0
    assert late_at(0.0, heartbeat_interval(lease)) == lease / 2


def test_a_new_housekeeper_has_as_long_as_between_two_beats_and_at_least_a_second() -> None:
    assert beat_late_after(30.0) == 15.0
    assert beat_late_after(600.0) == BEAT_LATE_AFTER * MAX_HEARTBEAT_INTERVAL
    assert beat_late_after(0.9) == 1.0


def test_the_databases_clock_on_the_monotonic_clock() -> None:
    db_now = datetime(2025, 1, 1, tzinfo=UTC)
    assert monotonic_at(50.0, db_now, None, 1.0) == float("inf")
    assert monotonic_at(50.0, db_now, db_now + timedelta(seconds=3), 0.5) == 53.5
    # A moment already past is now, never in the past.
    assert monotonic_at(50.0, db_now, db_now - timedelta(seconds=3), 0.0) == 50.0
