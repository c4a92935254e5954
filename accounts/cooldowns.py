"""Cooldowns shared by every process: one row per key in accounts_cooldown.

Taking a cooldown is one statement, so two processes asking at once cannot both get it:
the upsert writes a new deadline only where none is running, and returns a row only then.
Call it inside the transaction of the work it guards: a rollback gives the cooldown back.

The same rows hold reservations (``hold``, ``running``): a username a signup asked for is
held for as long as an unverified signup would keep it, whichever account the address has.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime

from django.db import connection
from django.db.models.functions import Now

from .exceptions import CooldownActive
from .models import Cooldown

_TAKE = f"""
INSERT INTO {Cooldown._meta.db_table} (key, until)
VALUES (%(key)s, coalesce(%(now)s::timestamptz, now()) + %(seconds)s * interval '1 second')
ON CONFLICT (key) DO UPDATE SET until = excluded.until
    WHERE {Cooldown._meta.db_table}.until <= coalesce(%(now)s::timestamptz, now())
RETURNING until
"""

_HOLD = f"""
INSERT INTO {Cooldown._meta.db_table} (key, until)
VALUES (%(key)s, coalesce(%(now)s::timestamptz, now()) + %(seconds)s * interval '1 second')
ON CONFLICT (key) DO UPDATE SET until = greatest({Cooldown._meta.db_table}.until, excluded.until)
"""

_REMAINING = f"""
SELECT extract(epoch FROM until - coalesce(%(now)s::timestamptz, now()))
FROM {Cooldown._meta.db_table} WHERE key = %(key)s
"""


def cooldown_key(scope: str, value: str) -> str:
    """The stored key of ``value`` (an address, an IP) in ``scope``: a digest, not the value."""
    return hashlib.sha256(f"{scope}\x00{value}".encode()).hexdigest()


def take(*keys: tuple[str, int], now: datetime | None = None) -> None:
    """Start each (key, seconds) cooldown, or raise CooldownActive with the longest wait if
    any is running. Keys with 0 seconds are skipped (that cooldown is off)."""
    waits = []
    with connection.cursor() as cursor:
        for key, seconds in keys:
            if seconds <= 0:
                continue
            cursor.execute(_TAKE, {"key": key, "seconds": seconds, "now": now})
            if cursor.fetchone() is None:
                cursor.execute(_REMAINING, {"key": key, "now": now})
                found = cursor.fetchone()
                waits.append(max(1, math.ceil(found[0])) if found else 1)
    if waits:
        raise CooldownActive(retry_after=max(waits))


def hold(key: str, seconds: int, *, now: datetime | None = None) -> None:
    """Keep ``key`` running for at least ``seconds`` from now, whether or not it runs already."""
    with connection.cursor() as cursor:
        cursor.execute(_HOLD, {"key": key, "seconds": seconds, "now": now})


def running(key: str, *, now: datetime | None = None) -> bool:
    return Cooldown.objects.filter(key=key, until__gt=now or Now()).exists()


def prune(*, now: datetime | None = None) -> int:
    """Delete cooldowns that have run out."""
    deleted, _ = Cooldown.objects.filter(until__lte=now or Now()).delete()
    return deleted
