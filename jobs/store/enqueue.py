"""Inserting jobs: one INSERT for one row, COPY for many keyless ones (copying.py), dedupe
keys resolved."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

from ..retry import backoff
from .copying import COPY_THRESHOLD, Overlap, copy_jobs
from .rows import (
    KEYED_COLUMNS,
    ONE_COLUMNS,
    NewJob,
    insert_many_params,
    insert_params,
    plain_params,
)
from .statements import execute, outside_transaction, sql

# Marks running dedupe holders lapsed on a connection of its own: (ids, now) -> None.
Lapse = Callable[[list[uuid.UUID], datetime | None], None]


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
    checked = len(jobs) == 1 and outside_transaction(cursor.connection)
    with Overlap(meanwhile) as overlap:
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


def _one_transaction(cursor: Any) -> AbstractContextManager[Any]:
    """Several statements insert a batch (the wake-up, a COPY per kind of row, the keyed
    rows). Outside a transaction (autocommit) they get one of their own: the batch's rows
    commit together or not at all, and the wake-up is delivered once they are visible, not
    when its own statement ends (workers woken before the rows exist would find nothing and
    sleep a whole poll interval). Inside the caller's transaction, nothing is added."""
    conn = cursor.connection
    return conn.transaction() if outside_transaction(conn) else nullcontext()


def _insert_many(
    cursor: Any,
    jobs: Sequence[NewJob],
    *,
    notify: bool,
    checked: bool,
    now: datetime | None,
    prepare: bool,
    lapse: Lapse | None,
    meanwhile: Overlap,
) -> list[tuple[uuid.UUID, datetime | None]]:
    result: dict[int, tuple[uuid.UUID, datetime | None]] = {}
    pending = list(enumerate(jobs))
    # Rows under a limit go through insert.sql, which gives their keys a state row.
    keyless = [(index, job) for index, job in pending if job.dedupe_key is None and job.limit_name is None]
    if len(keyless) >= COPY_THRESHOLD:
        # Many rows that cannot conflict: COPY is several times faster than INSERT.
        times = copy_jobs(cursor, [job for _, job in keyless], notify=notify, now=now, meanwhile=meanwhile)
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
            params = insert_params(pending[0][1], KEYED_COLUMNS)
        else:
            statement = sql("insert")
            params = insert_many_params([job for _, job in pending])
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


def _insert_one(
    cursor: Any, job: NewJob, *, notify: bool, checked: bool, now: datetime | None, prepare: bool
) -> datetime:
    if now is None and job.is_plain():
        statement = sql("insert_plain")
        params = plain_params(job)
    else:
        statement = sql("insert_one")
        params = insert_params(job, ONE_COLUMNS)
        params["now"] = now
    params["notify"] = notify
    params["checked"] = checked
    execute(cursor, statement, params, prepare=prepare)
    created_at: datetime = cursor.fetchone()[0]
    return created_at


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


def lapse_holders(cursor: Any, ids: list[uuid.UUID], now: datetime | None) -> None:
    """Mark the jobs ``ids`` whose dedupe window has passed lapsed (insert_jobs's ``lapse``,
    on a connection of its own). Rows locked this moment (a heartbeat, an outcome) are
    skipped: insert_jobs tries again."""
    cursor.execute(
        """
        UPDATE jobs_job SET dedupe_lapsed = true
        WHERE id IN (SELECT id FROM jobs_job
                     WHERE id = ANY(%(ids)s::uuid[]) AND NOT dedupe_lapsed
                       AND dedupe_until <= coalesce(%(now)s, statement_timestamp())
                     FOR UPDATE SKIP LOCKED)
        """,
        {"ids": ids, "now": now},
    )
