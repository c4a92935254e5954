"""Every write to a job's state, each one guarded UPDATE (or INSERT) on the job table.

Functions take a DB-API cursor, so they run on whatever connection the caller holds:
the caller's Django connection for enqueue (invariant 1: same transaction as the caller's
own rows), a worker's dedicated autocommit connection for everything after the claim.

Statements take ``now=None``; tests pass a time to move the database's clock without
sleeping (invariant 6).

Modules by caller: ``enqueue`` (producers: INSERT on the caller's connection, or COPY by
``copying``, of ``rows``: NewJob, a job's own columns and its task's JobOptions);
for workers, ``claims`` (claim, promote), ``outcomes`` (record outcomes and progress,
release), ``leases`` (heartbeat, reap) and ``limit_keys`` (the housekeeper's look over the
limits' keys); ``operator`` (the console and tools: cancel, discard, replay, run now,
prune, pause and resume a queue); and ``workflows`` (jobs.workflows: insert a workflow's
rows, signal, cancel, time out waits, retry a step), whose advancing happens in the
database functions of jobs/sql/functions/; and ``schedules`` (jobs.scheduler: a slot's fire
record and its outcome, pruning old ones), imported as ``jobs.store.schedules``.
"""

from .claims import LIMITS_DECLARED, UNSTARTED_LEASE, Claimed, Due, claim, limits_declared, next_due, promote
from .copying import COPY_THRESHOLD, copy_jobs_as_made
from .enqueue import insert_jobs, lapse_holders
from .leases import REAP_GRACE, Beat, Reaped, extend_leases, reap, reap_token
from .limit_keys import Tended, tend_limit_keys
from .operator import cancel, discard, limit_changed, pause_queue, prune, replay, resume_queue, run_now
from .outcomes import record_outcomes, record_progress, release
from .rows import NewJob
from .statements import NOTIFY_CHANNEL, listen, sql

__all__ = [
    "COPY_THRESHOLD", "LIMITS_DECLARED", "NOTIFY_CHANNEL", "REAP_GRACE", "UNSTARTED_LEASE", "Beat",
    "Claimed", "Due", "NewJob", "Reaped", "Tended", "cancel", "claim", "copy_jobs_as_made",
    "discard", "extend_leases", "insert_jobs", "lapse_holders", "limit_changed", "limits_declared", "listen",
    "next_due", "pause_queue", "promote", "prune",
    "reap", "reap_token", "record_outcomes", "record_progress", "release", "replay", "resume_queue",
    "run_now", "sql", "tend_limit_keys",
]  # fmt: skip
