"""The worker's writes: claim, record outcomes (fenced), heartbeat, release, reap, promote."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from .statements import execute, sql

# A lease is taken back once it has been expired this long (seconds): a heartbeat that
# had to retry past a row lock lands first.
REAP_GRACE = 0.5
# A claimed job is leased this long (or for its own lease, if shorter) until its attempt
# starts: the executor starts it within half of that or gives it back, and a started
# attempt's lease is extended to the full length (its start mark, the heartbeat). So a
# worker that dies with prefetched jobs in hand holds them for seconds, not for a full
# lease of minutes.
UNSTARTED_LEASE = 10.0


class Claimed(NamedTuple):
    """One row the claim returned (jobs/sql/claim.sql's RETURNING, in order)."""

    id: uuid.UUID
    task_path: str
    # JSON text, decoded by the lane that runs the job (jobs/worker/attempt.py: once, in
    # C, and not at all for the commonest payloads, where psycopg's jsonb loader would
    # run Python for each).
    args: Any
    kwargs: Any
    attempt: int
    max_attempts: int
    # Hard limit (the job's, else the worker's default; None: none) and lease, seconds.
    timeout: float | None
    lease_seconds: float
    trace_id: str
    queue_name: str
    priority: int
    run_at: datetime
    # Claimed after its not-started deadline: the claim ended it expired; do not run it.
    expired: bool
    handbacks: int
    soft_timeout: float | None
    jitter: bool | None
    backoff_base: float | None
    backoff_cap: float | None
    non_retryable: list[str]
    created_at: datetime
    # What the claim did with it: "start" (run it), "expire" (ended expired), or
    # "wait_rate"/"wait_concurrency" (a limit kept it waiting, as 'scheduled').
    decision: str = "start"
    # Under a rate, seconds from the claim statement's start: to the start time the rate
    # gave it ("start": the worker holds it until then), or to when it comes back to be
    # claimed ("wait_rate"); None for every other job.
    start_in: float | None = None
    # Seconds from its due time to this claim, on the database's clock (the queue wait).
    waited: float = 0.0
    # A workflow step: its outcome write locks its workflow first (sql/record_outcomes.sql).
    in_workflow: bool = False


class Reaped(NamedTuple):
    id: uuid.UUID
    state: str
    task_path: str
    attempt: int
    # True when the attempt had never started and was given back unused.
    unstarted: bool
    queue_name: str


def claim(
    cursor: Any,
    *,
    worker: uuid.UUID,
    queues: Sequence[str],
    limit: int,
    quotas: Sequence[int] | None = None,
    now: datetime | None = None,
    lease_seconds: float = 300.0,
    default_timeout: float | None = None,
    unstarted_lease: float = UNSTARTED_LEASE,
    limits: bool = True,
    prepare: bool = False,
) -> list[Claimed]:
    """Claim up to ``limit`` due jobs, at most ``quotas[i]`` from ``queues[i]`` (default:
    ``limit`` each, so earlier queues fill the batch first). Jobs without their own lease or
    time limit get ``lease_seconds`` and ``default_timeout``; until they start, they are
    leased for ``unstarted_lease`` at most.

    ``limits=False``: the caller believes no limit is declared, and the statement without
    the limits' planning claims (sql/claim_plain.sql). If one is, its jobs are left queued
    and the last row returned has the decision LIMITS_DECLARED and nothing else: claim
    again with ``limits=True``.

    ``prepare`` (a psycopg cursor only): the statement is prepared from its first run,
    not from psycopg's threshold on (statements.execute)."""
    execute(
        cursor,
        sql("claim" if limits else "claim_plain"),
        {
            "queues": list(queues),
            "quotas": list(quotas) if quotas is not None else [limit] * len(queues),
            "limit": limit,
            "worker": worker,
            "now": now,
            "lease_seconds": lease_seconds,
            "default_timeout": default_timeout,
            "unstarted_lease": unstarted_lease,
        },
        prepare=prepare,
    )
    return [Claimed._make(row) for row in cursor.fetchall()]


# The decision of claim_plain.sql's last row when a limit is declared (see claim).
LIMITS_DECLARED = "limits"


def limits_declared(cursor: Any) -> bool:
    """Whether any rate or concurrency limit is declared (a row of jobs_limit): then only
    claim.sql claims correctly."""
    cursor.execute("SELECT EXISTS (SELECT 1 FROM jobs_limit)")
    return bool(cursor.fetchone()[0])


def record_outcomes(
    cursor: Any,
    *,
    worker: uuid.UUID,
    outcomes: Sequence[dict[str, Any]],
    started: Sequence[tuple[uuid.UUID | str, int]] = (),
    now: datetime | None = None,
    progress: Sequence[dict[str, Any]] = (),
    lease_seconds: float = 300.0,
    prepare: bool = False,
) -> set[uuid.UUID]:
    """Apply attempt outcomes (see sql/record_outcomes.sql) and mark the ``started``
    (id, attempt) pairs as begun, their leases extended to full length (their own, else
    ``lease_seconds``); return the ids whose outcome was recorded.

    Each outcome is a dict with ``id`` and ``attempt`` (the fence) and ``state`` plus, as
    needed, ``result``, ``delay``, ``refund``, ``error``, ``progress`` (the attempt's
    last report) and ``in_workflow`` (False: not a workflow step; missing: maybe one).
    ``progress`` holds interim reports of running attempts (``id``, ``attempt``,
    ``progress``), written first, fenced the same way. ``prepare``: as for claim.
    """
    if progress:
        record_progress(cursor, worker=worker, reports=progress, now=now)
    if not outcomes and not started:
        return set()
    outcomes = [{**o, "error": _storable_error(o["error"])} if o.get("error") else o for o in outcomes]
    execute(
        cursor,
        sql("record_outcomes"),
        {
            # Whether the batch may hold a workflow step (an outcome that does not say is
            # taken as one): only then are workflows locked before the job rows.
            "steps": any(o.get("in_workflow", True) for o in outcomes),
            "worker": worker,
            "outcomes": json.dumps(outcomes, default=str),
            "started": json.dumps([{"id": str(job_id), "attempt": attempt} for job_id, attempt in started]),
            "now": now,
            "lease_seconds": lease_seconds,
        },
        prepare=prepare,
    )
    return {row[0] for row in cursor.fetchall()}


def record_progress(
    cursor: Any, *, worker: uuid.UUID, reports: Sequence[dict[str, Any]], now: datetime | None = None
) -> set[uuid.UUID]:
    """Write running attempts' progress (dicts of ``id``, ``attempt``, ``progress``), each
    only while its job runs under ``worker``'s claim and the same attempt. Returns the ids
    written. A sibling of the outcome statement rather than a part of it, so that batches
    without progress (nearly all) run the statement they always ran."""
    cursor.execute(
        sql("record_progress"),
        {"worker": worker, "reports": json.dumps(list(reports), default=str), "now": now},
    )
    return {row[0] for row in cursor.fetchall()}


def _storable_error(error: dict[str, Any]) -> dict[str, Any]:
    # jsonb text cannot hold U+0000 or a lone surrogate (os.fsdecode makes those of file
    # names that are not UTF-8), and one such string fails the whole batch; an error
    # message or traceback may quote either. It is text for people, so write them out.
    return {k: _storable_text(v) if isinstance(v, str) else v for k, v in error.items()}


def _storable_text(text: str) -> str:
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


class Beat(NamedTuple):
    """What a heartbeat did: the jobs it extended, and those it skipped because another
    transaction had them locked (still this worker's: worth another try soon). A pair in
    neither is no longer held."""

    extended: set[uuid.UUID]
    locked: set[uuid.UUID]


def extend_leases(
    cursor: Any,
    *,
    held: Sequence[tuple[uuid.UUID, uuid.UUID]],
    now: datetime | None = None,
    lease_seconds: float = 300.0,
) -> Beat:
    """Heartbeat: extend, by its own lease (``lease_seconds`` for jobs whose task sets
    none), each running job of the (job id, claim token) pairs in hand. Rows another
    transaction has locked (an enqueuer marking a dedupe key lapsed, an operator) are
    skipped rather than waited for, and reported so that the caller retries them soon;
    jobs no longer held (cancelled, finished, reaped) are neither.
    """
    if not held:
        return Beat(set(), set())
    cursor.execute(
        sql("extend_leases"),
        {
            "ids": [job_id for job_id, _ in held],
            "tokens": [token for _, token in held],
            "now": now,
            "lease_seconds": lease_seconds,
        },
    )
    rows = cursor.fetchall()
    return Beat({job_id for job_id, done in rows if done}, {job_id for job_id, done in rows if not done})


def release(
    cursor: Any,
    *,
    worker: uuid.UUID,
    ids: Iterable[uuid.UUID | str] | None = None,
    keep: Iterable[uuid.UUID | str] = (),
    started_too: bool = False,
) -> list[uuid.UUID]:
    """Give running jobs whose attempt has not started back to the queue without using
    the attempt (shutdown, a batch stuck behind a slow handler, a lost claim reply).
    ``ids=None`` releases all of the token's unstarted jobs but ``keep``. ``started_too``
    gives back started ones as well (handlers killed when a shutdown ran out of time).
    A job whose cancel was requested ends 'cancelled' instead of going back."""
    cursor.execute(
        """
        UPDATE jobs_job
        SET state = CASE WHEN cancel_requested_at IS NULL THEN 'queued' ELSE 'cancelled' END,
            finished_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE statement_timestamp() END,
            attempt = attempt - 1, worker_ids = trim_array(worker_ids, 1),
            started_attempt = least(started_attempt, attempt - 1),
            cancel_requested_at = NULL, worker_id = NULL, lease_expires_at = NULL
        WHERE state = 'running' AND worker_id = %(worker)s
          AND (%(started_too)s OR started_attempt < attempt)
          AND (%(all)s OR id = ANY(%(ids)s::uuid[]))
          AND NOT (id = ANY(%(keep)s::uuid[]))
        RETURNING id
        """,
        {
            "worker": worker,
            "all": ids is None,
            "ids": list(ids or ()),
            "keep": list(keep),
            "started_too": started_too,
        },
    )
    return [row[0] for row in cursor.fetchall()]


@cache
def _reap_sql(lost: str) -> str:
    return sql("reap").replace("{lost}", lost)


_LEASE_EXPIRED = (
    "lease_expires_at < coalesce(%(now)s, statement_timestamp()) - %(grace)s * interval '1 second'"
)
_HELD_BY_EXECUTOR = "worker_id = %(token)s::uuid"


def reap(
    cursor: Any,
    *,
    backoff_base: float,
    backoff_cap: float,
    limit: int = 1000,
    now: datetime | None = None,
    grace: float = REAP_GRACE,
) -> list[Reaped]:
    """Take back jobs whose lease expired (see sql/reap.sql)."""
    cursor.execute(
        _reap_sql(_LEASE_EXPIRED),
        {
            "base": backoff_base,
            "cap": backoff_cap,
            "limit": limit,
            "now": now,
            "grace": grace,
            "reason": None,
        },
    )
    return [Reaped._make(row) for row in cursor.fetchall()]


def reap_token(
    cursor: Any,
    *,
    token: uuid.UUID,
    reason: str,
    backoff_base: float,
    backoff_cap: float,
    now: datetime | None = None,
) -> list[Reaped]:
    """Settle every running job left under a dead executor's claim token, as the reaper
    would once their leases ran out: unstarted ones back unused, started ones as lost."""
    cursor.execute(
        _reap_sql(_HELD_BY_EXECUTOR),
        {"base": backoff_base, "cap": backoff_cap, "limit": 100_000, "now": now, "token": token,
         "reason": reason},
    )  # fmt: skip
    return [Reaped._make(row) for row in cursor.fetchall()]


def promote(cursor: Any, *, now: datetime | None = None, limit: int = 5000) -> dict[str, int]:
    """Make scheduled jobs that came due claimable; returns {queue: count} (and NOTIFYs)."""
    cursor.execute(sql("promote"), {"now": now, "limit": limit})
    return {queue: count for queue, count, _ in cursor.fetchall()}


class Due(NamedTuple):
    """When the housekeeping next has something to do, on the database's clock."""

    now: datetime
    # The earliest lease of a running job and the earliest due time of a scheduled one
    # (not parked on a concurrency limit: a release wakes those, at no time).
    lease_expires: datetime | None
    scheduled: datetime | None
    # The earliest timeout of a workflow's signal wait (jobs/workflows/).
    signal_timeout: datetime | None = None


def next_due(cursor: Any) -> Due:
    """Three top-1 index reads (jobs_job_lease, jobs_job_scheduled, jobs_wfnode_deadline)
    and the clock."""
    cursor.execute(
        """
        SELECT statement_timestamp(),
               (SELECT min(lease_expires_at) FROM jobs_job WHERE state = 'running'),
               (SELECT min(run_at) FROM jobs_job WHERE state = 'scheduled' AND limit_wait <> 'concurrency'),
               (SELECT min(deadline) FROM jobs_workflow_node WHERE kind = 'signal' AND state = 'running')
        """
    )
    return Due._make(cursor.fetchone())


def cancelled_among(cursor: Any, ids: Sequence[uuid.UUID]) -> list[tuple[str, str]]:
    """(task path, queue) of the jobs among ``ids`` that are cancelled: read when a fenced
    outcome write found its job gone, to count why (the metrics)."""
    cursor.execute(
        "SELECT task_path, queue_name FROM jobs_job WHERE id = ANY(%s) AND state = 'cancelled'", [list(ids)]
    )
    return [(task, queue) for task, queue in cursor.fetchall()]
