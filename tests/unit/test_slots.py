"""The slot table executors, the supervisor and the housekeeper share: what one writes the
others read, across fork, and never half of one write with half of another."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

from jobs.worker.seqlock import WORD
from jobs.worker.slots import _FIELDS, _HEADER_SIZE, Running, SlotTable, _alive


def test_empty_slot_reads_as_nothing_running() -> None:
    table = SlotTable(2, entries=3)
    assert all(table.read(e, i) is None for e in range(2) for i in range(3))
    assert table.executor(0) is None


def test_start_and_clear_round_trip_per_entry() -> None:
    table = SlotTable(2, entries=3)
    job_id = uuid.uuid4()
    table.start(1, 2, job_id, 2, 100.5, 130.5, 60.0)
    assert table.read(1, 2) == Running(job_id, 2, 100.5, 130.5, 60.0)
    assert table.running(1) == [(2, Running(job_id, 2, 100.5, 130.5, 60.0))]
    assert table.running(0) == [] and table.read(1, 1) is None
    table.clear(1, 2)
    assert table.read(1, 2) is None


def test_an_executor_block_is_named_and_reset_for_its_successor() -> None:
    table = SlotTable(1, entries=2)
    first, second = uuid.uuid4(), uuid.uuid4()
    table.set_executor(0, first, 123)
    table.start(0, 1, uuid.uuid4(), 1, 1.0, 0.0, 30.0)
    assert table.executor(0) == (first, 123)
    table.reset(0, second, 456)
    assert table.executor(0) == (second, 456) and table.running(0) == []


def test_a_snapshot_changes_its_sequence_with_every_write() -> None:
    table = SlotTable(1)
    job_id = uuid.uuid4()
    table.start(0, 0, job_id, 1, 1.0, 2.0, 3.0)
    before = table.snapshot(0, 0)
    table.clear(0, 0)
    table.start(0, 0, job_id, 1, 1.0, 2.0, 3.0)
    after = table.snapshot(0, 0)
    assert before.running == after.running and before.seq != after.seq


def test_what_a_forked_executor_writes_the_supervisor_reads() -> None:
    table = SlotTable(1)
    job_id = uuid.uuid4()
    pid = os.fork()
    if pid == 0:
        table.start(0, 0, job_id, 1, 1.0, 0.0, 300.0)
        os._exit(0)
    os.waitpid(pid, 0)
    assert table.read(0, 0) == Running(job_id, 1, 1.0, 0.0, 300.0)


def test_a_write_killed_half_way_does_not_hang_the_reader() -> None:
    # A writer killed after its fields, before its second sequence bump, and not named in
    # the header (forked, not yet named): the sequence stays odd, and the reader gives up
    # waiting and takes what is there.
    table = SlotTable(1)
    job_id = uuid.uuid4()
    _half_written(table, job_id)
    assert table.read(0, 0) == Running(job_id, 3, 5.0, 6.0, 7.0)


def _half_written(table: SlotTable, job_id: uuid.UUID) -> None:
    """Entry 0 of executor 0 as a writer leaves it between its fields and its second
    sequence bump."""
    table.seq.begin(_HEADER_SIZE)
    _FIELDS.pack_into(table.buf, _HEADER_SIZE + WORD, job_id.bytes, 3, 5.0, 6.0, 7.0)


def test_a_write_whose_writer_died_is_taken_at_once() -> None:
    table = SlotTable(1)
    job_id = uuid.uuid4()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    table.set_executor(0, uuid.uuid4(), pid)
    _half_written(table, job_id)
    assert table.read(0, 0) == Running(job_id, 3, 5.0, 6.0, 7.0)


def test_a_write_in_progress_is_waited_for_while_its_writer_lives() -> None:
    # The writer is descheduled mid-write for longer than a reader waits for a writer it
    # cannot name: named and alive, it is waited for, and its whole write is what is read.
    table = SlotTable(1)
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    try:
        table.set_executor(0, uuid.uuid4(), pid)
        _half_written(table, uuid.uuid4())
        finished = uuid.uuid4()

        def finish() -> None:
            time.sleep(0.3)
            _FIELDS.pack_into(table.buf, _HEADER_SIZE + WORD, finished.bytes, 4, 1, 2, 3)
            table.seq.end(_HEADER_SIZE, 0)

        writer = threading.Thread(target=finish)
        writer.start()
        assert table.read(0, 0) == Running(finished, 4, 1.0, 2.0, 3.0)
        writer.join()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_zombie_is_not_alive() -> None:
    # The supervisor reads a dead executor's entries before it reaps it.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _alive(pid)
        assert _alive(os.getpid())
    finally:
        os.waitpid(pid, 0)


def test_a_block_taken_over_after_a_write_killed_half_way_reads_whole_again() -> None:
    # The dead executor's entry is left odd; its successor's writes must still read as
    # whole writes, not as writes forever in progress.
    table = SlotTable(1)
    _half_written(table, uuid.uuid4())
    job_id = uuid.uuid4()
    table.reset(0, uuid.uuid4(), os.getpid())
    table.start(0, 0, job_id, 1, 1.0, 0.0, 30.0)
    assert table.snapshot(0, 0).seq % 2 == 0
    assert table.read(0, 0) == Running(job_id, 1, 1.0, 0.0, 30.0)


def test_the_supervisor_clearing_a_dead_executors_block_is_named_as_its_writer() -> None:
    # Readers wait for the writes of the process the header names: during the clear, that
    # is the supervisor (alive), not the dead executor whose writes are taken at once.
    table = SlotTable(1, entries=2)
    token = uuid.uuid4()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    table.set_executor(0, token, pid)
    _half_written(table, uuid.uuid4())
    table.clear_all(0)
    assert table.executor(0) == (token, os.getpid())
    assert table.running(0) == [] and table.snapshot(0, 0).seq % 2 == 0


def test_reads_during_constant_writes_are_never_torn() -> None:
    table = SlotTable(1)
    first = (uuid.UUID(int=1), 1, 1.0, 1.0, 1.0)
    second = (uuid.UUID(int=2**128 - 1), 2, 2.0, 2.0, 2.0)
    pid = os.fork()
    if pid == 0:
        try:
            while True:
                table.start(0, 0, *first)
                table.start(0, 0, *second)
        finally:
            os._exit(0)
    # Named as the supervisor names an executor it forked: reads wait for its writes.
    table.set_executor(0, uuid.uuid4(), pid)
    try:
        seen = set()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            running = table.read(0, 0)
            if running is not None:
                seen.add(
                    (
                        running.job_id,
                        running.attempt,
                        running.started,
                        running.deadline,
                        running.lease_seconds,
                    )
                )
        assert seen <= {first, second}
        assert seen, "the writer never got to write"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
