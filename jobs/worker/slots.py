"""What each executor process is running right now, in memory shared with the supervisor.

The executor writes a slot before and after each handler; the supervisor reads it to
enforce hard time limits, to pick the heartbeat interval, and to know which job a dead
executor was running. A sequence number (odd while a write is in progress) keeps the
supervisor from reading half a write.
"""

from __future__ import annotations

import mmap
import struct
import uuid
from dataclasses import dataclass

# seq, job id, attempt, started (monotonic), hard deadline (monotonic, 0: none), and the
# shortest lease among the jobs the executor holds (the supervisor beats at a third of it)
_SLOT = struct.Struct("=Q16siddd")


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
        self.buf = mmap.mmap(-1, _SLOT.size * size)

    def _write(self, index: int, *fields: object) -> None:
        offset = index * _SLOT.size
        seq = struct.unpack_from("=Q", self.buf, offset)[0]
        struct.pack_into("=Q", self.buf, offset, seq + 1)
        _SLOT.pack_into(self.buf, offset, seq + 1, *fields)
        struct.pack_into("=Q", self.buf, offset, seq + 2)

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
        offset = index * _SLOT.size
        for _ in range(100):
            seq, job, attempt, started, deadline, lease = _SLOT.unpack_from(self.buf, offset)
            if seq % 2 == 0 and struct.unpack_from("=Q", self.buf, offset)[0] == seq:
                break
        # A writer killed mid-write leaves an odd sequence: the fields are still whole.
        if job == bytes(16):
            return None
        return Running(uuid.UUID(bytes=job), attempt, started, deadline, lease)
