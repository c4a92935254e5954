"""What each executor process is running right now, in memory shared with the supervisor
and the housekeeper.

Each executor has a block: a header (its claim token and pid, written by the supervisor
when it forks the executor) and one entry per lane slot (the inline handler, each handler
thread, each concurrent async task). An executor writes an entry *before* anything of the
job runs (even the import of its task) and clears it after; the supervisor reads entries to
enforce hard time limits and to know what a dead executor was running, the housekeeper to
extend the leases of exactly the jobs in hand.

A sequence number per entry (odd while a write is in progress) keeps readers from taking
half a write; the supervisor also uses it to tell that an entry did not change between two
reads (the time-limit kill, supervisor.py).
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
# job id, attempt, started (monotonic), hard deadline (monotonic, 0: none), lease seconds
_FIELDS = struct.Struct("=16siddd")
_ENTRY_SIZE = _SEQ.size + _FIELDS.size
# claim token, pid
_HEADER = struct.Struct("=16si")
_HEADER_SIZE = _SEQ.size + _HEADER.size
# A write takes microseconds, but the writer may be preempted in the middle of one; the
# reader yields and waits this long before it takes a write that never finished (its
# writer was killed mid-write).
_READ_PATIENCE = 0.1
_EMPTY = bytes(16)


@dataclass(frozen=True, slots=True)
class Running:
    job_id: uuid.UUID
    attempt: int
    started: float
    deadline: float
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An entry as read, with the sequence number it was read at (even: a whole write)."""

    seq: int
    running: Running | None


class SlotTable:
    def __init__(self, executors: int, entries: int = 1) -> None:
        self.executors = executors
        self.entries = entries
        self.block_size = _HEADER_SIZE + entries * _ENTRY_SIZE
        # Anonymous shared mapping: inherited by forked processes, shared both ways.
        self.buf = mmap.mmap(-1, self.block_size * executors)

    # --- layout ---------------------------------------------------------------------

    def _header_offset(self, executor: int) -> int:
        return executor * self.block_size

    def _entry_offset(self, executor: int, entry: int) -> int:
        if not 0 <= entry < self.entries:
            raise IndexError(f"slot entry {entry} out of range (0..{self.entries - 1})")
        return executor * self.block_size + _HEADER_SIZE + entry * _ENTRY_SIZE

    def _write(self, offset: int, layout: struct.Struct, *fields: object) -> None:
        seq = _SEQ.unpack_from(self.buf, offset)[0]
        _SEQ.pack_into(self.buf, offset, seq + 1)
        layout.pack_into(self.buf, offset + _SEQ.size, *fields)
        _SEQ.pack_into(self.buf, offset, seq + 2)

    def _read(self, offset: int, layout: struct.Struct) -> tuple[int, tuple[object, ...]]:
        give_up = 0.0
        while True:
            seq = _SEQ.unpack_from(self.buf, offset)[0]
            fields = layout.unpack_from(self.buf, offset + _SEQ.size)
            if seq % 2 == 0 and _SEQ.unpack_from(self.buf, offset)[0] == seq:
                return seq, fields
            now = time.monotonic()
            if not give_up:
                give_up = now + _READ_PATIENCE
            elif now > give_up:
                return seq, fields
            os.sched_yield()

    # --- executors (written by the supervisor) --------------------------------------------

    def set_executor(self, executor: int, token: uuid.UUID, pid: int) -> None:
        self._write(self._header_offset(executor), _HEADER, token.bytes, pid)

    def executor(self, executor: int) -> tuple[uuid.UUID, int] | None:
        """The claim token and pid of the executor in this block, if one was started."""
        _, (token, pid) = self._read(self._header_offset(executor), _HEADER)
        assert isinstance(token, bytes) and isinstance(pid, int)
        return None if token == _EMPTY else (uuid.UUID(bytes=token), pid)

    def reset(self, executor: int, token: uuid.UUID, pid: int = 0) -> None:
        """A new executor takes the block: clear every entry, then name it."""
        for entry in range(self.entries):
            self.clear(executor, entry)
        self.set_executor(executor, token, pid)

    # --- entries (written by the executor) ------------------------------------------------

    def start(
        self,
        executor: int,
        entry: int,
        job_id: uuid.UUID,
        attempt: int,
        started: float,
        deadline: float,
        lease_seconds: float,
    ) -> None:
        self._write(
            self._entry_offset(executor, entry),
            _FIELDS,
            job_id.bytes,
            attempt,
            started,
            deadline,
            lease_seconds,
        )

    def clear(self, executor: int, entry: int) -> None:
        self._write(self._entry_offset(executor, entry), _FIELDS, _EMPTY, 0, 0.0, 0.0, 0.0)

    def snapshot(self, executor: int, entry: int) -> Snapshot:
        seq, (job, attempt, started, deadline, lease) = self._read(
            self._entry_offset(executor, entry), _FIELDS
        )
        if job == _EMPTY:
            return Snapshot(seq, None)
        assert isinstance(job, bytes)
        return Snapshot(seq, Running(uuid.UUID(bytes=job), attempt, started, deadline, lease))  # type: ignore[arg-type]

    def read(self, executor: int, entry: int = 0) -> Running | None:
        return self.snapshot(executor, entry).running

    def running(self, executor: int) -> list[tuple[int, Running]]:
        """Every entry of this executor that holds a job: (entry, what it runs)."""
        found = []
        for entry in range(self.entries):
            running = self.read(executor, entry)
            if running is not None:
                found.append((entry, running))
        return found
