"""Inserting jobs: one INSERT for one row, COPY for many, dedupe keys resolved."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any

from psycopg.copy import LibpqWriter
from psycopg.generators import copy_end
from psycopg.pq import TransactionStatus
from psycopg.pq.abc import PGresult
from psycopg.waiting import Ready, Wait

from ..retry import backoff
from .statements import NOTIFY_CHANNEL, execute, sql

# Marks running dedupe holders lapsed on a connection of its own: (ids, now) -> None.
Lapse = Callable[[list[uuid.UUID], datetime | None], None]


@dataclass(slots=True)
class NewJob:
    """A validated row to insert; args and kwargs are already JSON text. (Not frozen: a
    frozen dataclass's __init__ costs four times as much, per job of a bulk enqueue.)"""

    id: uuid.UUID
    task_path: str
    queue_name: str
    priority: int
    args: str
    kwargs: str
    run_at: datetime | None
    max_attempts: int
    timeout: float | None
    lease_seconds: float | None
    backoff_base: float | None = None
    backoff_cap: float | None = None
    jitter: bool | None = None
    soft_timeout: float | None = None
    # Dotted paths of exception classes that are not retried.
    non_retryable: tuple[str, ...] = ()
    dedupe_key: str | None = None
    dedupe_window: float | None = None
    trace_id: str = ""
    owner: str = ""
    public: bool = False
    expires_at: datetime | None = None
    limit_name: str | None = None
    limit_key: str = ""
    # A workflow step (jobs/workflows/): its node and place, inserted 'waiting'.
    workflow_node: uuid.UUID | None = None
    workflow_position: int | None = None

    def is_plain(self) -> bool:
        """No options of its own: every column but the basics takes its default."""
        return (
            self.run_at is None and self.timeout is None and self.lease_seconds is None
            and self.backoff_base is None and self.backoff_cap is None and self.jitter is None
            and self.soft_timeout is None and not self.non_retryable and not self.owner
            and not self.public and self.expires_at is None and self.dedupe_key is None
            and self.limit_name is None
        )  # fmt: skip


_INSERT_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "args", "kwargs", "run_at",
    "max_attempts", "timeout", "lease_seconds", "backoff_base", "backoff_cap", "jitter",
    "soft_timeout", "dedupe_key", "dedupe_window", "trace_id", "owner", "public", "expires_at",
)  # fmt: skip


def insert_jobs(
    cursor: Any,
    jobs: Sequence[NewJob],
    *,
    notify: bool = True,
    now: datetime | None = None,
    prepare: bool = False,
    lapse: Lapse | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> list[tuple[uuid.UUID, datetime | None]]:
    """Insert jobs; return, in input order, (id, created_at) for each: the new row's
    created_at (the database's clock, which the result reports as ``enqueued_at``).

    ``created_at`` is None where a dedupe key was held by an unfinished job: the id is then
    that job's. A holder whose window has passed is marked lapsed and a new job inserted;
    ``lapse(ids, now)``, if given, marks running holders outside the caller's transaction.

    ``meanwhile()``, if given, is called once: while PostgreSQL is still writing the rows of
    a COPY (the caller's own work on the batch, done in time the client would spend
    waiting), else after the rows are inserted. Whatever it raises is raised once the
    statement has ended, as it would be had it been called after.
    """
    # One job alone outside any transaction is one statement that commits at once: its
    # wake-up check (insert_one.sql) still holds at the commit; anywhere else it would not.
    checked = len(jobs) == 1 and _outside_transaction(cursor.connection)
    with _Overlap(meanwhile) as overlap:
        if len(jobs) == 1 and jobs[0].dedupe_key is None and jobs[0].limit_name is None:
            # The common call: one job, nothing to deduplicate.
            at = _insert_one(cursor, jobs[0], notify=notify, checked=checked, now=now, prepare=prepare)
            return [(jobs[0].id, at)]
        # A keyed job alone is one statement, and on a conflict look-ups that stand on their own.
        with _one_transaction(cursor) if len(jobs) > 1 else nullcontext():
            return _insert_many(
                cursor,
                jobs,
                notify=notify,
                checked=checked,
                now=now,
                prepare=prepare,
                lapse=lapse,
                meanwhile=overlap,
            )


class _Overlap:
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

    def __enter__(self) -> _Overlap:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            return
        self()
        if self._error is not None:
            raise self._error


def _one_transaction(cursor: Any) -> AbstractContextManager[Any]:
    """Several statements insert a batch (the wake-up, a COPY per kind of row, the keyed
    rows). Outside a transaction (autocommit) they get one of their own: the batch's rows
    commit together or not at all, and the wake-up is delivered once they are visible, not
    when its own statement ends (workers woken before the rows exist would find nothing and
    sleep a whole poll interval). Inside the caller's transaction, nothing is added."""
    conn = cursor.connection
    return conn.transaction() if _outside_transaction(conn) else nullcontext()


def _outside_transaction(conn: Any) -> bool:
    return bool(conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE)


def _insert_many(
    cursor: Any,
    jobs: Sequence[NewJob],
    *,
    notify: bool,
    checked: bool,
    now: datetime | None,
    prepare: bool,
    lapse: Lapse | None,
    meanwhile: _Overlap,
) -> list[tuple[uuid.UUID, datetime | None]]:
    result: dict[int, tuple[uuid.UUID, datetime | None]] = {}
    pending = list(enumerate(jobs))
    # Rows under a limit go through insert.sql, which gives their keys a state row.
    keyless = [(index, job) for index, job in pending if job.dedupe_key is None and job.limit_name is None]
    if len(keyless) >= COPY_THRESHOLD:
        # Many rows that cannot conflict: COPY is several times faster than INSERT.
        times = _copy_jobs(cursor, [job for _, job in keyless], notify=notify, now=now, meanwhile=meanwhile)
        result.update((index, (job.id, at)) for (index, job), at in zip(keyless, times, strict=True))
        copied = {index for index, _ in keyless}
        pending = [(index, job) for index, job in pending if index not in copied]
    # Each round either inserts a row or finds its holder; a holder that finishes or
    # lapses between the INSERT and the look-up sends the row round once more.
    for attempt in range(5):
        if not pending:
            break
        if len(pending) == 1 and pending[0][1].limit_name is None:
            statement = sql("insert_one_keyed")
            params = {col: getattr(pending[0][1], col) for col in _INSERT_COLUMNS}
            params["non_retryable"] = list(pending[0][1].non_retryable)
        else:
            statement = sql("insert")
            params = {col: [getattr(job, col) for _, job in pending] for col in _MANY_COLUMNS}
            # unnest() cannot take an array per row: dotted paths joined by spaces instead.
            params["non_retryable"] = [" ".join(job.non_retryable) for _, job in pending]
        params["notify"] = notify
        params["checked"] = checked
        params["now"] = now
        execute(cursor, statement, params, prepare=prepare)
        inserted = {row[0]: row[1] for row in cursor.fetchall()}
        conflicted = []
        for index, job in pending:
            if job.id in inserted:
                result[index] = (job.id, inserted[job.id])
            else:
                conflicted.append((index, job))
        pending = _resolve_dedupe_conflicts(cursor, conflicted, result, now, lapse)
        if pending:
            # A holder that was locked for a moment (its heartbeat, its outcome): again soon.
            time.sleep(backoff(attempt + 1, base=0.005, cap=math.inf, jitter=False))
    if pending:
        raise RuntimeError("dedupe conflicts did not settle after 5 rounds")
    return [result[i] for i in range(len(jobs))]


_ONE_COLUMNS = tuple(col for col in _INSERT_COLUMNS if col not in ("dedupe_key", "dedupe_window"))
_MANY_COLUMNS = (*_INSERT_COLUMNS, "limit_name", "limit_key")


_PLAIN_COLUMNS = ("id", "task_path", "queue_name", "priority", "args", "kwargs", "max_attempts", "trace_id")


def _insert_one(
    cursor: Any, job: NewJob, *, notify: bool, checked: bool, now: datetime | None, prepare: bool
) -> datetime:
    if now is None and job.is_plain():
        statement = sql("insert_plain")
        params = {col: getattr(job, col) for col in _PLAIN_COLUMNS}
    else:
        statement = sql("insert_one")
        params = {col: getattr(job, col) for col in _ONE_COLUMNS}
        params["non_retryable"] = list(job.non_retryable)
        params["now"] = now
    params["notify"] = notify
    params["checked"] = checked
    execute(cursor, statement, params, prepare=prepare)
    created_at: datetime = cursor.fetchone()[0]
    return created_at


# Batches of keyless rows at least this large go through COPY.
COPY_THRESHOLD = 50
_COPY_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "args", "kwargs", "max_attempts", "timeout",
    "lease_seconds", "backoff_base", "backoff_cap", "jitter", "soft_timeout", "non_retryable",
    "trace_id", "owner", "public", "expires_at",
)  # fmt: skip


def _copy_jobs(
    cursor: Any, jobs: Sequence[NewJob], *, notify: bool, now: datetime | None, meanwhile: _Overlap
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
        _copy_rows(cursor, _PLAIN_COLUMNS, map(_plain_values, bare), None if dressed or timed else meanwhile)
    if dressed:
        _copy_rows(cursor, _COPY_COLUMNS, map(_copy_values, dressed), None if timed else meanwhile)
    if timed:
        _copy_rows(
            cursor,
            (*_COPY_COLUMNS, "run_at", "state"),
            ((*_copy_values(job), run_at, state) for job, run_at, state in timed),
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
    if not _outside_transaction(conn):
        raise ValueError("copy_jobs_as_made needs a connection outside any transaction; use insert_jobs")
    if first.run_at is not None or first.dedupe_key is not None or first.limit_name is not None:
        raise ValueError("copy_jobs_as_made takes rows due now, without dedupe key or limit")
    columns, values = (_PLAIN_COLUMNS, _plain_values) if first.is_plain() else (_COPY_COLUMNS, _copy_values)
    with _Overlap(meanwhile) as overlap, conn.transaction():
        _copy_rows(cursor, columns, map(values, chain([first], rest)), overlap)
        [created_at] = _wake_and_stamp(cursor, {first.queue_name} if notify else set(), [first.id])
    assert created_at is not None
    return created_at


def _plain_values(job: NewJob) -> tuple[Any, ...]:
    return (job.id, job.task_path, job.queue_name, job.priority, job.args, job.kwargs, job.max_attempts,
            job.trace_id)  # fmt: skip


def _copy_rows(
    cursor: Any, columns: Sequence[str], rows: Iterable[tuple[Any, ...]], meanwhile: _Overlap | None
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

    def __init__(self, cursor: Any, meanwhile: _Overlap) -> None:
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


def _copy_values(job: NewJob) -> tuple[Any, ...]:
    return (
        job.id, job.task_path, job.queue_name, job.priority, job.args, job.kwargs,
        job.max_attempts, job.timeout, job.lease_seconds, job.backoff_base, job.backoff_cap,
        job.jitter, job.soft_timeout, list(job.non_retryable), job.trace_id, job.owner,
        job.public, job.expires_at,
    )  # fmt: skip


def _resolve_dedupe_conflicts(
    cursor: Any,
    conflicted: list[tuple[int, NewJob]],
    result: dict[int, tuple[uuid.UUID, datetime | None]],
    now: datetime | None,
    lapse: Lapse | None,
) -> list[tuple[int, NewJob]]:
    if not conflicted:
        return []
    keys = sorted({job.dedupe_key for _, job in conflicted if job.dedupe_key})
    cursor.execute(
        """
        SELECT dedupe_key, id, dedupe_until IS NOT NULL
                               AND dedupe_until <= coalesce(%(now)s, statement_timestamp()),
               state = 'running'
        FROM jobs_job
        WHERE dedupe_key = ANY(%(keys)s::text[]) AND NOT dedupe_lapsed
          AND state IN ('scheduled', 'queued', 'running')
        """,
        {"keys": keys, "now": now},
    )
    found = cursor.fetchall()
    holders = {key: (job_id, lapsed) for key, job_id, lapsed, _ in found}
    here = [job_id for _, job_id, lapsed, running in found if lapsed and not (running and lapse)]
    elsewhere = [job_id for _, job_id, lapsed, running in found if lapsed and running and lapse]
    if here:
        cursor.execute(
            "UPDATE jobs_job SET dedupe_lapsed = true WHERE id = ANY(%(ids)s::uuid[])",
            {"ids": here},
        )
    if elsewhere and lapse is not None:
        # A running holder's row must not stay locked by this caller's transaction: its
        # worker's heartbeat would skip it until the caller commits. Marked on a connection
        # of its own, committed at once (a lapsed window is lapsed whatever the caller does).
        lapse(elsewhere, now)
    retry = []
    for index, job in conflicted:
        holder = holders.get(job.dedupe_key)
        if holder is None or holder[1]:
            retry.append((index, job))
        else:
            result[index] = (holder[0], None)
    return retry
