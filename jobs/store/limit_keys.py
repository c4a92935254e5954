"""The housekeeper's writes to the limits' keys (jobs/sql/tend_limit_keys.sql): wake jobs
parked on a key that has a slot free and no wake-up on its way, and drop the state rows of
keys no unfinished job names."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from .statements import sql


class Tended(NamedTuple):
    # Parked jobs made claimable, and keys' state rows dropped.
    woken: int
    dropped: int


def tend_limit_keys(cursor: Any, *, batch: int = 1000, now: datetime | None = None) -> Tended:
    """One look over the limits' keys; at most ``batch`` rows dropped, and at most
    ``batch`` parked jobs woken per key whose limit has no concurrency any more."""
    cursor.execute(sql("tend_limit_keys"), {"batch": batch, "now": now})
    woken, dropped = cursor.fetchone()
    return Tended(int(woken), int(dropped))
