"""The lease extensions' clock, as pure arithmetic (no processes, no database): how often
the housekeeper extends the leases in hand, when an extension counts as late (the
supervisor then holds the claims and restarts the housekeeper), and when a moment on the
database's clock comes on this process's monotonic clock."""

from __future__ import annotations

from datetime import datetime

# The registry row and the leases are refreshed at least this often.
MAX_HEARTBEAT_INTERVAL = 10.0
# A lease extension is late this many heartbeat intervals after the last one: the
# supervisor then holds the claims and restarts the housekeeper, with half a lease left
# for its successor to connect and extend.
BEAT_LATE_AFTER = 1.5


def heartbeat_interval(shortest_lease: float) -> float:
    """Seconds between two lease extensions: a third of the shortest lease in hand, at most
    MAX_HEARTBEAT_INTERVAL."""
    return min(MAX_HEARTBEAT_INTERVAL, shortest_lease / 3)


def late_at(last_beat: float, interval: float) -> float:
    """When the extension after one made at ``last_beat`` is late."""
    return last_beat + BEAT_LATE_AFTER * interval


def beat_late_after(lease_seconds: float) -> float:
    """Seconds a new housekeeper has for its first lease extension: as long as a running
    one has between two, and at least a second to fork and connect."""
    return max(1.0, BEAT_LATE_AFTER * heartbeat_interval(lease_seconds))


def monotonic_at(now: float, db_now: datetime, at: datetime | None, extra: float) -> float:
    """The monotonic time at which the database's clock reads ``at`` + ``extra`` (``now``
    being the monotonic time at which it read ``db_now``); never earlier than ``now``."""
    if at is None:
        return float("inf")
    return now + max((at - db_now).total_seconds() + extra, 0.0)
