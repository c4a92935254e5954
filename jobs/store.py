"""Every write to a job's state, each one guarded UPDATE (or INSERT) on the job table.

Functions take a DB-API cursor, so they run on whatever connection the caller holds:
the caller's Django connection for enqueue (invariant 1: same transaction as the caller's
own rows), a worker's dedicated autocommit connection for everything after the claim.

Statements take ``now=None``; tests pass a time to move the database's clock without
sleeping (invariant 6).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from .exceptions import JobNotFound, TransitionNotAllowed
from .models import Job
from .states import State

SQL_DIR = Path(__file__).with_name("sql")
NOTIFY_CHANNEL = "jobs_queued"


@cache
def sql(name: str) -> str:
    """The statement in jobs/sql/<name>.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated row to insert; args and kwargs are already JSON text."""

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
    dedupe_key: str | None = None
    dedupe_window: float | None = None
    trace_id: str = ""


_INSERT_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "args", "kwargs", "run_at",
    "max_attempts", "timeout", "lease_seconds", "dedupe_key", "dedupe_window", "trace_id",
)  # fmt: skip


def insert_jobs(
    cursor: Any,
    jobs: Sequence[NewJob],
    *,
    notify: bool = True,
    now: datetime | None = None,
    prepare: bool = False,
) -> list[tuple[uuid.UUID, bool]]:
    """Insert jobs; return, in input order, (id, created) for each.

    ``created`` is False where a dedupe key was held by an unfinished job: the id is then
    that job's. A holder whose window has passed is marked lapsed and a new job inserted.
    """
    result: dict[int, tuple[uuid.UUID, bool]] = {}
    pending = list(enumerate(jobs))
    keyless = [(index, job) for index, job in pending if job.dedupe_key is None]
    if len(keyless) >= COPY_THRESHOLD:
        # Many rows that cannot conflict: COPY is several times faster than INSERT.
        _copy_jobs(cursor, [job for _, job in keyless], notify=notify, now=now)
        result.update((index, (job.id, True)) for index, job in keyless)
        pending = [(index, job) for index, job in pending if job.dedupe_key is not None]
    # Each round either inserts a row or finds its holder; a holder that finishes or
    # lapses between the INSERT and the look-up sends the row round once more.
    for _ in range(5):
        if not pending:
            break
        if len(pending) == 1:
            statement = sql("insert_one")
            params = {col: getattr(pending[0][1], col) for col in _INSERT_COLUMNS}
        else:
            statement = sql("insert")
            params = {col: [getattr(job, col) for _, job in pending] for col in _INSERT_COLUMNS}
        params["notify"] = notify
        params["now"] = now
        if prepare:
            cursor.execute(statement, params, prepare=True)
        else:
            cursor.execute(statement, params)
        inserted = {row[0] for row in cursor.fetchall()}
        conflicted = []
        for index, job in pending:
            if job.id in inserted:
                result[index] = (job.id, True)
            else:
                conflicted.append((index, job))
        pending = _resolve_dedupe_conflicts(cursor, conflicted, result, now)
    if pending:
        raise RuntimeError("dedupe conflicts did not settle after 5 rounds")
    return [result[i] for i in range(len(jobs))]


# Batches of keyless rows at least this large go through COPY.
COPY_THRESHOLD = 50
_COPY_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "args", "kwargs", "max_attempts", "timeout",
    "lease_seconds", "trace_id",
)  # fmt: skip


def _copy_jobs(cursor: Any, jobs: Sequence[NewJob], *, notify: bool, now: datetime | None) -> None:
    """COPY rows without dedupe keys, then wake workers as insert.sql does. On the caller's
    connection, so inside the caller's transaction when there is one."""
    for explicit_run_at in (False, True):
        # Rows without run_at take the column's default, now(): the database clock decides.
        rows = [job for job in jobs if (job.run_at is not None or now is not None) == explicit_run_at]
        if not rows:
            continue
        columns = _COPY_COLUMNS + (("run_at",) if explicit_run_at else ())
        with cursor.copy(f"COPY jobs_job ({', '.join(columns)}) FROM STDIN") as copy:
            for job in rows:
                values = (
                    job.id, job.task_path, job.queue_name, job.priority, job.args, job.kwargs,
                    job.max_attempts, job.timeout, job.lease_seconds, job.trace_id,
                )  # fmt: skip
                copy.write_row((*values, job.run_at or now) if explicit_run_at else values)
    if notify:
        # One NOTIFY per queue that received a due job, as in insert.sql: a queue's earliest
        # run_at (NULL: now) is compared with the database's clock.
        due_now = {job.queue_name for job in jobs if job.run_at is None and now is None}
        earliest: dict[str, datetime] = {}
        for job in jobs:
            at = job.run_at or now
            if at is not None and job.queue_name not in due_now:
                earliest[job.queue_name] = min(at, earliest.get(job.queue_name, at))
        cursor.execute(
            """
            SELECT pg_notify(%(channel)s, q.name)
            FROM unnest(%(queues)s::text[], %(run_at)s::timestamptz[]) AS q(name, run_at)
            WHERE q.run_at IS NULL OR q.run_at <= coalesce(%(now)s, now())
            """,
            {
                "channel": NOTIFY_CHANNEL,
                "queues": [*due_now, *earliest],
                "run_at": [None] * len(due_now) + list(earliest.values()),
                "now": now,
            },
        )


def _resolve_dedupe_conflicts(
    cursor: Any,
    conflicted: list[tuple[int, NewJob]],
    result: dict[int, tuple[uuid.UUID, bool]],
    now: datetime | None,
) -> list[tuple[int, NewJob]]:
    if not conflicted:
        return []
    keys = sorted({job.dedupe_key for _, job in conflicted if job.dedupe_key})
    cursor.execute(
        """
        SELECT dedupe_key, id, dedupe_until IS NOT NULL
                               AND dedupe_until <= coalesce(%(now)s, now())
        FROM jobs_job
        WHERE dedupe_key = ANY(%(keys)s::text[]) AND NOT dedupe_lapsed
          AND state IN ('queued', 'running')
        """,
        {"keys": keys, "now": now},
    )
    holders = {key: (job_id, lapsed) for key, job_id, lapsed in cursor.fetchall()}
    lapsed_ids = [job_id for job_id, lapsed in holders.values() if lapsed]
    if lapsed_ids:
        cursor.execute(
            "UPDATE jobs_job SET dedupe_lapsed = true WHERE id = ANY(%(ids)s::uuid[])",
            {"ids": lapsed_ids},
        )
    retry = []
    for index, job in conflicted:
        holder = holders.get(job.dedupe_key)
        if holder is None or holder[1]:
            retry.append((index, job))
        else:
            result[index] = (holder[0], False)
    return retry


def claim(
    cursor: Any,
    *,
    worker: uuid.UUID,
    queues: Sequence[str],
    limit: int,
    now: datetime | None = None,
    lease_seconds: float = 300.0,
    default_timeout: float | None = None,
) -> list[tuple[Any, ...]]:
    """Claim up to ``limit`` due jobs from ``queues`` (visited in that order). Jobs without
    their own lease or time limit get ``lease_seconds`` and ``default_timeout``."""
    cursor.execute(
        sql("claim"),
        {
            "queues": list(queues),
            "limit": limit,
            "worker": worker,
            "now": now,
            "lease_seconds": lease_seconds,
            "default_timeout": default_timeout,
        },
    )
    return cursor.fetchall()


def record_outcomes(
    cursor: Any,
    *,
    worker: uuid.UUID,
    outcomes: Sequence[dict[str, Any]],
    now: datetime | None = None,
) -> set[uuid.UUID]:
    """Apply attempt outcomes (see sql/record_outcomes.sql); return the ids that changed.

    Each outcome is a dict with ``id`` and ``attempt`` (the fence) and ``state`` plus, as
    needed, ``result``, ``delay``, ``refund`` and ``error``.
    """
    if not outcomes:
        return set()
    outcomes = [{**o, "error": _storable_error(o["error"])} if o.get("error") else o for o in outcomes]
    cursor.execute(
        sql("record_outcomes"),
        {"worker": worker, "outcomes": json.dumps(outcomes, default=str), "now": now},
    )
    return {row[0] for row in cursor.fetchall()}


def _storable_error(error: dict[str, Any]) -> dict[str, Any]:
    # jsonb text cannot hold U+0000 or a lone surrogate (os.fsdecode makes those of file
    # names that are not UTF-8), and one such string fails the whole batch; an error
    # message or traceback may quote either. It is text for people, so write them out.
    return {k: _storable_text(v) if isinstance(v, str) else v for k, v in error.items()}


def _storable_text(text: str) -> str:
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def extend_leases(
    cursor: Any,
    *,
    tokens: Sequence[uuid.UUID],
    now: datetime | None = None,
    lease_seconds: float = 300.0,
) -> int:
    """Heartbeat: extend every running job held by these claim tokens by its own lease
    (``lease_seconds`` for jobs whose task sets none)."""
    if not tokens:
        return 0
    cursor.execute(
        """
        WITH extended AS (
            UPDATE jobs_job
            SET lease_expires_at = coalesce(%(now)s, now())
                                   + coalesce(lease_seconds, %(lease_seconds)s) * interval '1 second'
            WHERE state = 'running' AND worker_id = ANY(%(tokens)s::uuid[])
            RETURNING 1
        )
        SELECT count(*) FROM extended
        """,
        {"tokens": list(tokens), "now": now, "lease_seconds": lease_seconds},
    )
    return int(cursor.fetchone()[0])


def release(
    cursor: Any,
    *,
    worker: uuid.UUID,
    ids: Iterable[uuid.UUID | str] | None = None,
    keep: Iterable[uuid.UUID | str] = (),
) -> list[uuid.UUID]:
    """Give running jobs back to the queue without using an attempt (shutdown, a lost
    executor's unstarted jobs). ``ids=None`` releases all of the token's jobs but ``keep``.
    """
    cursor.execute(
        """
        UPDATE jobs_job
        SET state = 'queued', attempt = attempt - 1, worker_ids = trim_array(worker_ids, 1),
            worker_id = NULL, lease_expires_at = NULL
        WHERE state = 'running' AND worker_id = %(worker)s
          AND (%(all)s OR id = ANY(%(ids)s::uuid[]))
          AND NOT (id = ANY(%(keep)s::uuid[]))
        RETURNING id
        """,
        {
            "worker": worker,
            "all": ids is None,
            "ids": list(ids or ()),
            "keep": list(keep),
        },
    )
    return [row[0] for row in cursor.fetchall()]


def reap(
    cursor: Any,
    *,
    backoff_base: float,
    backoff_cap: float,
    limit: int = 1000,
    now: datetime | None = None,
) -> list[tuple[Any, ...]]:
    """Take back jobs whose lease expired (see sql/reap.sql)."""
    cursor.execute(sql("reap"), {"base": backoff_base, "cap": backoff_cap, "limit": limit, "now": now})
    return cursor.fetchall()


# --- Operator actions (admin, CLI): ORM guarded UPDATEs on the default connection. ------


def _guarded_update(job_id: uuid.UUID | str, allowed: Iterable[State], **values: Any) -> None:
    allowed = list(allowed)
    changed = Job.objects.filter(id=job_id, state__in=allowed).update(**values)
    if changed:
        return
    state = Job.objects.filter(id=job_id).values_list("state", flat=True).first()
    if state is None:
        raise JobNotFound(f"no job with id {job_id}")
    raise TransitionNotAllowed(f"job {job_id} is {state}; this needs one of {', '.join(allowed)}")


def cancel(job_id: uuid.UUID | str) -> None:
    """Cancel a queued or running job. A running handler is not interrupted, but its
    outcome is dropped by the fence."""
    _guarded_update(
        job_id,
        [State.QUEUED, State.RUNNING],
        state=State.CANCELLED,
        finished_at=Now(),
        worker_id=None,
        lease_expires_at=None,
    )


def discard(job_id: uuid.UUID | str, *, reason: str = "discarded by an operator") -> None:
    """Send a queued job straight to the dead-letter state without running it."""
    _guarded_update(job_id, [State.QUEUED], state=State.DEAD, finished_at=Now(), last_error=reason)


def replay(
    job_id: uuid.UUID | str,
    *,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> None:
    """Queue a dead or cancelled job again with fresh attempts, optionally with a new
    payload. Its error history is kept."""
    values: dict[str, Any] = {}
    if args is not None:
        values["args"] = args
    if kwargs is not None:
        values["kwargs"] = kwargs
    with transaction.atomic():
        _guarded_update(
            job_id,
            [State.DEAD, State.CANCELLED],
            state=State.QUEUED,
            attempt=0,
            worker_ids=[],
            run_at=Now(),
            finished_at=None,
            result=None,
            dedupe_lapsed=True,
            **values,
        )


def run_now(job_id: uuid.UUID | str) -> None:
    """Make a queued job (delayed or waiting for a retry) due at once."""
    _guarded_update(job_id, [State.QUEUED], run_at=Now())


def prune(*, retention: dict[State, float], now: datetime | None = None, batch: int = 5000) -> int:
    """Delete finished jobs older than their state's retention (seconds). Returns count."""
    from django.db import connection

    deleted = 0
    with connection.cursor() as cursor:
        for state, seconds in retention.items():
            while True:
                cursor.execute(
                    """
                    DELETE FROM jobs_job WHERE id IN (
                        SELECT id FROM jobs_job
                        WHERE state = %(state)s
                          AND finished_at < coalesce(%(now)s, now())
                                            - %(seconds)s * interval '1 second'
                        LIMIT %(batch)s)
                    """,
                    {"state": state, "now": now, "seconds": seconds, "batch": batch},
                )
                deleted += cursor.rowcount
                if cursor.rowcount < batch:
                    break
    return deleted
