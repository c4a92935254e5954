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

_lock = threading.Lock()
_last_ms = 0
_sequence = 0


def uuid7() -> uuid.UUID:
    global _last_ms, _sequence
    with _lock:
        ms = time.time_ns() // 1_000_000
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
        ms, sequence = _last_ms, _sequence
    tail = int.from_bytes(os.urandom(8)) & ((1 << 62) - 1)
    return uuid.UUID(int=(ms << 80) | (0x7 << 76) | (sequence << 64) | (0b10 << 62) | tail)
