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
reads (the time-limit kill, supervisor.py). A reader that finds a write in progress waits
for it as long as its writer lives (the executor named in the header for an entry, the
process that made the table for a header), and takes what is there only once the writer is
dead: killed in the middle of the write, it will never finish it.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
import uuid
from dataclasses import dataclass

from .seqlock import WORD, SequenceWords, aligned

# Each region is a sequence word (seqlock.py) and then its fields; regions are whole words
# long, so that every sequence word is aligned.
# job id, attempt, started (monotonic), hard deadline (monotonic, 0: none), lease seconds
_FIELDS = struct.Struct("=16siddd")
_ENTRY_SIZE = aligned(WORD + _FIELDS.size)
# claim token, pid
_HEADER = struct.Struct("=16si")
_HEADER_SIZE = aligned(WORD + _HEADER.size)
# A write takes microseconds, but its writer may be descheduled in the middle of one for
# far longer on a loaded machine. A reader waits for a live writer up to _LIVE_PATIENCE (a
# writer stopped with SIGSTOP would otherwise hold it forever) and for one it cannot name
# (an executor forked and not yet named in its header) up to _READ_PATIENCE; once the
# writer is dead it takes what is there at once.
_READ_PATIENCE = 0.1
_LIVE_PATIENCE = 2.0
_EMPTY = bytes(16)
_PROC = os.path.isdir("/proc/self")


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
        self.seq = SequenceWords(self.buf)
        # Headers are written only by the process that made the table (the supervisor).
        self.owner = os.getpid()

    # --- layout ---------------------------------------------------------------------

    def _header_offset(self, executor: int) -> int:
        return executor * self.block_size

    def _entry_offset(self, executor: int, entry: int) -> int:
        if not 0 <= entry < self.entries:
            raise IndexError(f"slot entry {entry} out of range (0..{self.entries - 1})")
        return executor * self.block_size + _HEADER_SIZE + entry * _ENTRY_SIZE

    def _write(self, offset: int, layout: struct.Struct, *fields: object) -> None:
        seq = self.seq.begin(offset)
        layout.pack_into(self.buf, offset + WORD, *fields)
        self.seq.end(offset, seq)

    def _read(self, offset: int, layout: struct.Struct, block: int | None) -> tuple[int, tuple[object, ...]]:
        """A whole write of the region at offset, waiting out one in progress while its
        writer is alive: an entry's is the executor named in its ``block``'s header, a
        header's (``block`` None) is the supervisor; looked up only then (0: not known)."""
        started = 0.0
        pid = 0
        while True:
            seq = self.seq.load(offset)
            fields = layout.unpack_from(self.buf, offset + WORD)
            if seq % 2 == 0 and self.seq.load(offset) == seq:
                return seq, fields
            now = time.monotonic()
            if not started:
                started, pid = now, self._writer(block)
            elif (pid and not _alive(pid)) or now - started > (_LIVE_PATIENCE if pid else _READ_PATIENCE):
                return seq, fields
            os.sched_yield()

    # --- executors (written by the supervisor) --------------------------------------------

    def set_executor(self, executor: int, token: uuid.UUID, pid: int) -> None:
        self._write(self._header_offset(executor), _HEADER, token.bytes, pid)

    def executor(self, executor: int) -> tuple[uuid.UUID, int] | None:
        """The claim token and pid of the executor in this block, if one was started."""
        _, (token, pid) = self._read(self._header_offset(executor), _HEADER, None)
        assert isinstance(token, bytes) and isinstance(pid, int)
        return None if token == _EMPTY else (uuid.UUID(bytes=token), pid)

    def clear_all(self, executor: int) -> None:
        """Clear every entry of a block whose executor is gone (the supervisor, once it
        has settled what the executor left). The header names this process as the
        entries' writer first, so that a reader waits for these writes rather than take
        them half done for the writes of a dead executor."""
        named = self.executor(executor)
        self.set_executor(executor, named[0] if named else uuid.UUID(bytes=_EMPTY), os.getpid())
        for entry in range(self.entries):
            self.clear(executor, entry)

    def _writer(self, block: int | None) -> int:
        if block is None:
            return self.owner
        named = self.executor(block)
        return named[1] if named else 0

    def reset(self, executor: int, token: uuid.UUID, pid: int = 0) -> None:
        """A new executor takes the block: clear every entry, then name it."""
        self.clear_all(executor)
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
            self._entry_offset(executor, entry), _FIELDS, executor
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


def _alive(pid: int) -> bool:
    """Whether the process runs still: not gone, and not a zombie waiting to be reaped (the
    supervisor reads the entries of an executor that died before it reaps it)."""
    if _PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read()
        except FileNotFoundError:
            return False
        # "pid (comm) state ...": comm may hold spaces and parentheses, so split at the last.
        state = fields[fields.rindex(b")") + 2 : fields.rindex(b")") + 3]
        return state not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
