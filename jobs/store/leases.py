"""Leases: the heartbeat that extends them, and the reaper that takes back jobs whose
lease ran out or whose executor died (jobs/sql/reap.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from .statements import sql

# A lease is taken back once it has been expired this long (seconds): a heartbeat that
# had to retry past a row lock lands first.
REAP_GRACE = 0.5


class Reaped(NamedTuple):
    id: uuid.UUID
    state: str
    task_path: str
    attempt: int
    # True when the attempt had never started and was given back unused.
    unstarted: bool
    queue_name: str


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


@cache
def _reap_sql(lost: str, candidates: str) -> str:
    return sql("reap").replace("{candidates}", candidates).replace("{lost}", lost)


_CUTOFF = "coalesce(%(now)s, statement_timestamp()) - %(grace)s * interval '1 second'"
_LEASE_EXPIRED = (f"lease_expires_at < {_CUTOFF}", f"SELECT * FROM jobs_leases_expired({_CUTOFF}, %(limit)s)")
_HELD = "worker_id = %(token)s::uuid"
_HELD_BY_EXECUTOR = (
    _HELD,
    f"SELECT id, workflow_node FROM jobs_job WHERE state = 'running' AND {_HELD} "
    "ORDER BY lease_expires_at LIMIT %(limit)s",
)


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
        _reap_sql(*_LEASE_EXPIRED),
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
        _reap_sql(*_HELD_BY_EXECUTOR),
        {"base": backoff_base, "cap": backoff_cap, "limit": 100_000, "now": now, "token": token,
         "reason": reason},
    )  # fmt: skip
    return [Reaped._make(row) for row in cursor.fetchall()]
