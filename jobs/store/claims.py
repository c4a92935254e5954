"""The worker's claim (one statement, jobs/sql/claim.sql) and the promotion of scheduled
jobs that came due, with the housekeeping's look at when it next has work."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from ..options import JobOptions
from .statements import execute, sql

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
    # When the job's first attempt started, if not in this claim (a retry, or a run after a
    # snooze or a handback); None when this attempt is its first start.
    first_started_at: datetime | None = None

    def attempted_at(self) -> datetime:
        """This attempt's start as the claim wrote it (the row's ``last_attempted_at``): the
        claim's time, or the start a rate limit planned. Worked out from ``run_at``,
        ``waited`` and ``start_in`` (whole microseconds, which a float8 carries to the
        microsecond) rather than returned by every claim for the few attempts that need it."""
        at = self.run_at + timedelta(seconds=self.waited)
        return at if self.start_in is None else at + timedelta(seconds=self.start_in)

    @property
    def options(self) -> JobOptions:
        """The job's options, as one value (with the worker's timeout and lease where the
        job has none of its own). Made on each read, not with the row: a worker reads them
        only to make a retry policy it has not made before (jobs.options.retry_key)."""
        return JobOptions.from_row(self)


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
    """The earliest lease among the running rows (jobs_job_holder: what the workers hold),
    two top-1 index reads (jobs_job_scheduled, jobs_wfnode_deadline) and the clock."""
    cursor.execute(
        """
        SELECT statement_timestamp(),
               jobs_lease_next_expiry(),
               (SELECT min(run_at) FROM jobs_job WHERE state = 'scheduled' AND limit_wait <> 'concurrency'),
               (SELECT min(deadline) FROM jobs_workflow_node WHERE kind = 'signal' AND state = 'running')
        """
    )
    return Due._make(cursor.fetchone())
