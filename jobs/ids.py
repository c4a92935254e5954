"""Job ids: UUIDs whose order is the order they were made in (UUID version 7).

The claim takes jobs of equal priority and due time oldest first, and rows enqueued in one
transaction (one COPY) share their due time: the id breaks the tie, so a batch starts in
the order it was enqueued. The first 48 bits are milliseconds since the epoch; within one
millisecond a 12-bit sequence keeps one process's ids increasing; the rest is random.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import datetime

_lock = threading.Lock()
_last_ms = 0
_sequence = 0

_RANDOM_BITS = (1 << 62) - 1
_new = uuid.UUID.__new__
_set = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


def uuid7() -> uuid.UUID:
    return uuid7_many(1)[0]


def uuid7_many(count: int) -> list[uuid.UUID]:
    """``count`` ids in increasing order (one lock, one read of the clock and of the
    system's randomness for them all: a bulk enqueue makes thousands)."""
    global _last_ms, _sequence
    stamps = []
    with _lock:
        ms = time.time_ns() // 1_000_000
        for _ in range(count):
            if ms > _last_ms:
                _last_ms = ms
                # Start low in a fresh millisecond so that many ids fit before it overflows.
                _sequence = int.from_bytes(os.urandom(2)) & 0x1FF
            else:
                _sequence += 1
                if _sequence > 0xFFF:
                    # More than 4,096 ids in one millisecond: borrow the next one.
                    _last_ms += 1
                    _sequence = 0
            stamps.append((_last_ms << 80) | (0x7 << 76) | (_sequence << 64) | (0b10 << 62))
    random = os.urandom(8 * count)
    return [
        _from_int(stamp | (int.from_bytes(random[8 * i : 8 * i + 8]) & _RANDOM_BITS))
        for i, stamp in enumerate(stamps)
    ]


def id_bound(moment: datetime) -> uuid.UUID:
    """The smallest time-ordered id made at ``moment`` or later (the smallest of all for a
    moment before 1970)."""
    ms = max(int(moment.timestamp() * 1000), 0)
    return uuid.UUID(int=(ms << 80) | (0x7 << 76))


def _from_int(value: int) -> uuid.UUID:
    # uuid.UUID(int=...) checks its arguments, a third of the cost of an id; the value is
    # a valid version-7 UUID by construction. (What Python 3.14's uuid does internally.)
    made = _new(uuid.UUID)
    _set(made, "int", value)
    _set(made, "is_safe", _UNKNOWN)
    return made
