"""The writes that end or annotate an attempt, each fenced on the claim (invariant 4):
record outcomes and start marks, record progress, release unstarted jobs back to the queue."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from .statements import execute, sql


def record_outcomes(
    cursor: Any,
    *,
    worker: uuid.UUID,
    outcomes: Sequence[Mapping[str, Any]],
    started: Sequence[tuple[uuid.UUID | str, int]] = (),
    now: datetime | None = None,
    progress: Sequence[dict[str, Any]] = (),
    lease_seconds: float = 300.0,
    prepare: bool = False,
) -> dict[uuid.UUID, str]:
    """Apply attempt outcomes (see sql/record_outcomes.sql) and mark the ``started``
    (id, attempt) pairs as begun, their leases extended to full length (their own, else
    ``lease_seconds``); return the ids whose outcome was recorded, each with the state its
    job ended in ('cancelled' for one whose cancel was requested while it ran, whatever
    the outcome said, unless it succeeded).

    Each outcome is a dict with ``id`` and ``attempt`` (the fence) and ``state`` plus, as
    needed, ``result``, ``delay``, ``refund``, ``error``, ``progress`` (the attempt's
    last report) and ``in_workflow`` (False: not a workflow step; missing: maybe one).
    ``progress`` holds interim reports of running attempts (``id``, ``attempt``,
    ``progress``), written first, fenced the same way. ``prepare``: as for claim.
    """
    if progress:
        record_progress(cursor, worker=worker, reports=progress, now=now)
    if not outcomes and not started:
        return {}
    outcomes = [{**o, "error": _storable_error(o["error"])} if o.get("error") else o for o in outcomes]
    execute(
        cursor,
        # Whether the batch may hold a workflow step (an outcome that does not say is taken
        # as one): only then are workflows locked before the job rows.
        record_statement(any(o.get("in_workflow", True) for o in outcomes)),
        {
            "worker": worker,
            "outcomes": json.dumps(outcomes, default=str),
            "started": json.dumps([{"id": str(job_id), "attempt": attempt} for job_id, attempt in started]),
            "now": now,
            "lease_seconds": lease_seconds,
        },
        prepare=prepare,
    )
    return dict(cursor.fetchall())


@cache
def record_statement(steps: bool) -> str:
    """record_outcomes.sql, with its workflow lock on (``steps``) or off: two statements, each
    prepared with a plan of its own, rather than one with the choice bound at each run,
    which PostgreSQL would plan anew every time (see the SQL file)."""
    statement = sql("record_outcomes")
    marker = "/* steps */ true"
    if marker not in statement:
        raise RuntimeError(f"record_outcomes.sql lost its {marker!r}")
    return statement if steps else statement.replace(marker, "/* steps */ false")


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
