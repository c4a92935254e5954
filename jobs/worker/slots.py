"""What each executor process is running right now, in memory shared with the supervisor.

The executor writes a slot before and after each handler; the supervisor reads it to
enforce hard time limits, to pick the heartbeat interval, and to know which job a dead
executor was running. A sequence number (odd while a write is in progress) keeps the
supervisor from reading half a write.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
import uuid
from dataclasses import dataclass

# The sequence number is a word of its own: struct's pack_into zero-fills the whole region
# it packs before writing, so packing it with the fields would let a reader see an even
# (zero) sequence in the middle of a write.
_SEQ = struct.Struct("=Q")
# job id, attempt, started (monotonic), hard deadline (monotonic, 0: none), and the
# shortest lease among the jobs the executor holds (the supervisor beats at a third of it)
_FIELDS = struct.Struct("=16siddd")
_SLOT_SIZE = _SEQ.size + _FIELDS.size
# A write takes microseconds, but the writer may be preempted in the middle of one; the
# reader yields and waits this long before it takes a write that never finished (its
# writer was killed mid-write).
_READ_PATIENCE = 0.1


@dataclass(frozen=True, slots=True)
class Running:
    job_id: uuid.UUID
    attempt: int
    started: float
    deadline: float
    lease_seconds: float


class SlotTable:
    def __init__(self, size: int) -> None:
        self.size = size
        # Anonymous shared mapping: inherited by forked executors, shared both ways.
        self.buf = mmap.mmap(-1, _SLOT_SIZE * size)

    def _write(self, index: int, *fields: object) -> None:
        offset = index * _SLOT_SIZE
        seq = _SEQ.unpack_from(self.buf, offset)[0]
        _SEQ.pack_into(self.buf, offset, seq + 1)
        _FIELDS.pack_into(self.buf, offset + _SEQ.size, *fields)
        _SEQ.pack_into(self.buf, offset, seq + 2)

    def start(
        self,
        index: int,
        job_id: uuid.UUID,
        attempt: int,
        started: float,
        deadline: float,
        lease_seconds: float,
    ) -> None:
        self._write(index, job_id.bytes, attempt, started, deadline, lease_seconds)

    def clear(self, index: int) -> None:
        self._write(index, bytes(16), 0, 0.0, 0.0, 0.0)

    def read(self, index: int) -> Running | None:
        offset = index * _SLOT_SIZE
        give_up = 0.0
        while True:
            seq = _SEQ.unpack_from(self.buf, offset)[0]
            job, attempt, started, deadline, lease = _FIELDS.unpack_from(self.buf, offset + _SEQ.size)
            if seq % 2 == 0 and _SEQ.unpack_from(self.buf, offset)[0] == seq:
                break
            now = time.monotonic()
            if not give_up:
                give_up = now + _READ_PATIENCE
            elif now > give_up:
                break
            os.sched_yield()
        if job == bytes(16):
            return None
        return Running(uuid.UUID(bytes=job), attempt, started, deadline, lease)
