"""The worker's writes: claim, record outcomes (fenced), heartbeat, release, reap."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from .statements import sql


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
