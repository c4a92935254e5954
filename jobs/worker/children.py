"""The supervisor's process table entries and its respawn policy, as pure decisions (no
processes): how long a slot whose executors keep dying waits before the next, when that
streak is worth a log line, how long a dead housekeeper's successor waits, and when a
live housekeeper is stuck or stalled."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..retry import backoff

# Respawn backoff while executors die in a row: base, cap (seconds). An executor that
# lived this long ends a streak.
RESPAWN_BASE = 0.5
RESPAWN_CAP = 30.0
HEALTHY_AFTER = 10.0
# The housekeeper is restarted when its loop has not turned for this long, or sooner when
# a lease extension is late (beats.BEAT_LATE_AFTER).
HOUSEKEEPER_STUCK = 10.0


@dataclass
class Child:
    index: int
    pid: int
    token: uuid.UUID
    started: float
    # Set when the supervisor killed it for overrunning: (job id, attempt, limit).
    killed_for: tuple[uuid.UUID, int, float] | None = None
    # Set when the shutdown timeout ran out: its jobs go back without using an attempt.
    killed_at_shutdown: bool = False


@dataclass
class Streak:
    """Consecutive deaths of the executor in one slot, for the respawn backoff."""

    deaths: int = 0
    respawn_at: float = 0.0


def record_death(streak: Streak, *, lived: float) -> float:
    """Count a death in ``streak`` (an executor that lived HEALTHY_AFTER or longer starts
    a new one); the seconds to wait before its successor: none for the first death, then
    a capped, jittered backoff."""
    if lived >= HEALTHY_AFTER:
        streak.deaths = 0
    streak.deaths += 1
    if streak.deaths > 1:
        return backoff(streak.deaths - 1, base=RESPAWN_BASE, cap=RESPAWN_CAP, spread=0.25)
    return 0.0


def worth_reporting(deaths: int) -> bool:
    """Once per streak, then at 2, 4, 8... deaths: why, not a line per crash."""
    return deaths > 1 and deaths & (deaths - 1) == 0


def housekeeper_respawn_delay(deaths: int) -> float:
    """The first successor at once (the leases in hand are waiting for it), later ones
    after a growing, jittered pause while housekeepers keep dying."""
    if deaths > 1:
        return backoff(deaths - 1, base=RESPAWN_BASE, cap=RESPAWN_CAP, spread=1.0)
    return 0.0


def housekeeper_health(now: float, *, progress: float, beat_late_at: float, started: float) -> str:
    """``stuck`` (its loop has not turned for HOUSEKEEPER_STUCK), ``stalled`` (a lease
    extension is late: its session hangs in a statement), ``healthy`` (it has lived
    HEALTHY_AFTER: its deaths no longer count) or ``young``."""
    if now - progress > HOUSEKEEPER_STUCK:
        return "stuck"
    if now > beat_late_at:
        return "stalled"
    if now - started > HEALTHY_AFTER:
        return "healthy"
    return "young"
