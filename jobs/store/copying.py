"""Inserting many rows by COPY, several times faster than INSERT: a batch's keyless rows
(insert_jobs), or a batch copied as its rows are made (copy_jobs_as_made). The caller's own
work on the batch is done while PostgreSQL writes the last rows (``meanwhile``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from datetime import UTC, datetime
from itertools import chain
from typing import Any

from psycopg.copy import LibpqWriter
from psycopg.generators import copy_end
from psycopg.pq.abc import PGresult
from psycopg.waiting import Ready, Wait

from .rows import COPY_COLUMNS, PLAIN_COLUMNS, NewJob, copy_values, plain_values
from .statements import NOTIFY_CHANNEL, outside_transaction

# Batches of keyless rows at least this large go through COPY.
COPY_THRESHOLD = 50


class Overlap:
    """A ``meanwhile`` called at most once, its exception kept until the COPY has ended
    (raised inside the COPY block, it would abort the caller's transaction). As a context:
    called on the way out if nothing called it, then its exception raised (unless the
    block raised its own)."""

    __slots__ = ("_call", "_error")

    def __init__(self, call: Callable[[], None] | None) -> None:
        self._call = call
        self._error: Exception | None = None

    def __call__(self) -> None:
        call, self._call = self._call, None
        if call is None:
            return
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - raised once the statement has ended
            self._error = exc

    def __enter__(self) -> Overlap:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            return
        self()
        if self._error is not None:
            raise self._error


def copy_jobs(
    cursor: Any, jobs: Sequence[NewJob], *, notify: bool, now: datetime | None, meanwhile: Overlap
) -> list[datetime | None]:
    """COPY rows without dedupe keys, on the caller's connection (inside the caller's
    transaction when there is one), waking workers as insert.sql does; returns each row's
    created_at."""
    clock = now or datetime.now(UTC)
    due_queues: set[str] = set()
    # Due now, by the columns' defaults (the statement's time, and 'queued'): with no
    # options of their own either (bare), or with some.
    bare: list[NewJob] = []
    dressed: list[NewJob] = []
    timed: list[tuple[NewJob, datetime, str]] = []
    # Which COPY each row goes in: 0 bare, 1 dressed, 2 timed.
    kinds: list[int] = []
    for job in jobs:
        if job.run_at is None and now is None:
            plain = job.is_plain()
            (bare if plain else dressed).append(job)
            kinds.append(0 if plain else 1)
            due_queues.add(job.queue_name)
        else:
            # 'scheduled' unless due by this process's clock: one scheduled a moment early
            # is promoted at once by the housekeeping, and one queued a moment early waits
            # for its run_at in the claim's own filter.
            run_at = job.run_at or clock
            state = "scheduled" if run_at > clock else "queued"
            timed.append((job, run_at, state))
            kinds.append(2)
            if state == "queued":
                due_queues.add(job.queue_name)
    # One COPY per kind of row; while the last ends, the caller's ``meanwhile``. The
    # columns' defaults stand for the options of bare rows (as in insert_plain.sql): less
    # than half the values travel.
    if bare:
        _copy_rows(cursor, PLAIN_COLUMNS, map(plain_values, bare), None if dressed or timed else meanwhile)
    if dressed:
        _copy_rows(cursor, COPY_COLUMNS, map(copy_values, dressed), None if timed else meanwhile)
    if timed:
        _copy_rows(
            cursor,
            (*COPY_COLUMNS, "run_at", "state"),
            ((*copy_values(job), run_at, state) for job, run_at, state in timed),
            meanwhile,
        )
    # Every row of a COPY has its statement's time: the first row of each tells it.
    firsts = [rows[0].id if rows else None for rows in (bare, dressed, [job for job, _, _ in timed[:1]])]
    stamps = _wake_and_stamp(cursor, due_queues if notify else set(), firsts)
    return [stamps[kind] for kind in kinds]


def _wake_and_stamp(
    cursor: Any, queues: set[str], copied: Sequence[uuid.UUID | None]
) -> list[datetime | None]:
    """Wake the workers of the queues, at commit (once the rows written exist), and return
    the created_at of the rows ``copied`` (None for None): the first row of each COPY, whose
    time is every row's of that COPY (the COPY statement's). It runs after the COPY, in its
    transaction, where the wake-up is sent at commit all the same. The wake-up is always
    sent: a batch is written in a transaction, and a queue's due jobs seen now may all be
    claimed by its commit (insert_one.sql)."""
    cursor.execute(
        """
        SELECT (SELECT count(*) FROM (SELECT pg_notify(%(channel)s, q.name)
                                      FROM unnest(%(queues)s::text[]) AS q(name)) AS woken),
               array(SELECT j.created_at
                     FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS c(id, ord)
                     LEFT JOIN jobs_job j ON j.id = c.id
                     ORDER BY c.ord)
        """,
        {"channel": NOTIFY_CHANNEL, "queues": sorted(queues), "ids": list(copied)},
    )
    created_at: list[datetime | None] = cursor.fetchone()[1]
    return created_at


def copy_jobs_as_made(
    cursor: Any,
    first: NewJob,
    rest: Iterable[NewJob],
    *,
    notify: bool = True,
    meanwhile: Callable[[], None] | None = None,
) -> datetime:
    """COPY a batch whose rows are made as they are sent: PostgreSQL inserts rows while the
    caller makes (and checks) the next ones, instead of waiting for the whole batch. Returns
    the rows' created_at (one for all: the COPY statement's time).

    ``first`` and every row of ``rest`` share their task and options: due now, no dedupe
    key, no limit (insert_jobs takes any other batch). Only on a connection outside any
    transaction: the batch gets one of its own, so that ``rest`` raising (a call that fails
    its checks) rolls back every row before it, and the caller gets that error. Inside the
    caller's transaction that would abort it: there, insert_jobs with the rows made first.
    ``meanwhile`` is as insert_jobs's: called once all rows are sent, while the server still
    inserts the last of them.
    """
    conn = cursor.connection
    if not outside_transaction(conn):
        raise ValueError("copy_jobs_as_made needs a connection outside any transaction; use insert_jobs")
    if first.run_at is not None or first.dedupe_key is not None or first.limit_name is not None:
        raise ValueError("copy_jobs_as_made takes rows due now, without dedupe key or limit")
    columns, values = (PLAIN_COLUMNS, plain_values) if first.is_plain() else (COPY_COLUMNS, copy_values)
    with Overlap(meanwhile) as overlap, conn.transaction():
        _copy_rows(cursor, columns, map(values, chain([first], rest)), overlap)
        [created_at] = _wake_and_stamp(cursor, {first.queue_name} if notify else set(), [first.id])
    assert created_at is not None
    return created_at


def _copy_rows(
    cursor: Any, columns: Sequence[str], rows: Iterable[tuple[Any, ...]], meanwhile: Overlap | None
) -> None:
    """COPY rows into jobs_job's ``columns``; ``meanwhile`` (if any) is called once they have
    all been sent, while the server inserts the last of them."""
    statement = f"COPY jobs_job ({', '.join(columns)}) FROM STDIN"
    writer = None if meanwhile is None else _MeanwhileWriter(cursor, meanwhile)
    with cursor.copy(statement, writer=writer) as copy:
        write = copy.write_row
        for row in rows:
            write(row)


class _MeanwhileWriter(LibpqWriter):
    """Ends a COPY, then calls ``meanwhile`` while waiting for the server's answer.

    PostgreSQL inserts the rows of a COPY in parcels of up to 64 KiB of rows (about 300 of
    ours); the last parcel waits for the end of the data, so the client's own work is best
    done between sending the end and reading the answer: psycopg's ending (copy_end), run
    step by step, and ``meanwhile`` called at its first wait to read."""

    def __init__(self, cursor: Any, meanwhile: Overlap) -> None:
        # psycopg's own cursor, also when given Django's wrapper (which passes attributes
        # through but not their assignment): the COPY's result must land where psycopg reads.
        super().__init__(getattr(cursor, "cursor", cursor))
        self._meanwhile = meanwhile

    def finish(self, exc: BaseException | None = None) -> None:
        if exc is not None:
            super().finish(exc)
            return
        # As LibpqWriter.finish: the COPY's result is the cursor's (its rowcount).
        self.cursor._results = [self.connection.wait(self._end())]

    def _end(self) -> Generator[Wait, Ready | int, PGresult]:
        steps = copy_end(self.connection.pgconn, None)
        try:
            wait = next(steps)
            while True:
                if wait == Wait.R:
                    self._meanwhile()  # once: later calls do nothing
                wait = steps.send((yield wait))
        except StopIteration as done:
            result: PGresult = done.value
            return result
