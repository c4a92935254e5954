"""Operator actions (console, CLI): ORM guarded UPDATEs on the default connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from ..exceptions import JobNotFound, TransitionNotAllowed
from ..models import Job
from ..states import State


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
    """Cancel a scheduled, queued or running job. A running handler is not interrupted,
    but its outcome is dropped by the fence."""
    _guarded_update(
        job_id,
        [State.SCHEDULED, State.QUEUED, State.RUNNING],
        state=State.CANCELLED,
        finished_at=Now(),
        worker_id=None,
        lease_expires_at=None,
    )


def discard(job_id: uuid.UUID | str, *, reason: str = "discarded by an operator") -> None:
    """Send a scheduled or queued job straight to the dead-letter state without running it."""
    _guarded_update(
        job_id, [State.SCHEDULED, State.QUEUED], state=State.DEAD, finished_at=Now(), last_error=reason
    )


def replay(
    job_id: uuid.UUID | str,
    *,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> None:
    """Queue a dead, cancelled or expired job again with fresh attempts, optionally with a
    new payload. Its error history is kept; an expired job's deadline is lifted."""
    values: dict[str, Any] = {}
    if args is not None:
        values["args"] = args
    if kwargs is not None:
        values["kwargs"] = kwargs
    with transaction.atomic():
        _guarded_update(
            job_id,
            [State.DEAD, State.CANCELLED, State.EXPIRED],
            state=State.QUEUED,
            expires_at=None,
            attempt=0,
            started_attempt=0,
            handbacks=0,
            worker_ids=[],
            run_at=Now(),
            finished_at=None,
            result=None,
            progress=None,
            dedupe_lapsed=True,
            **values,
        )


def run_now(job_id: uuid.UUID | str) -> None:
    """Make a scheduled job (delayed or waiting for a retry) due at once."""
    _guarded_update(job_id, [State.SCHEDULED, State.QUEUED], state=State.QUEUED, run_at=Now())


def prune(*, retention: dict[State, float], now: datetime | None = None, batch: int = 5000) -> int:
    """Delete finished jobs older than their state's retention (seconds), and their result
    files (jobs/files.py) once the rows are gone. Returns how many jobs."""
    from django.db import connection

    from ..files import PREFIX, delete_files

    deleted = 0
    with connection.cursor() as cursor:
        for state, seconds in retention.items():
            while True:
                cursor.execute(
                    """
                    DELETE FROM jobs_job WHERE id IN (
                        SELECT id FROM jobs_job
                        WHERE state = %(state)s
                          AND finished_at < coalesce(%(now)s, statement_timestamp())
                                            - %(seconds)s * interval '1 second'
                        LIMIT %(batch)s)
                    RETURNING id, result #>> '{file,name}'
                    """,
                    {"state": state, "now": now, "seconds": seconds, "batch": batch},
                )
                # Only a job's own folder: a result cannot point pruning at another file.
                names = [
                    name
                    for job_id, name in cursor.fetchall()
                    if name and name.startswith(f"{PREFIX}/{job_id}/")
                ]
                count = cursor.rowcount
                deleted += count
                if names:
                    # After the rows: a file whose row is still there is never missing. A
                    # crash in between leaves a file nobody links to, never the reverse.
                    delete_files(names)
                if count < batch:
                    break
    return deleted


def limit_changed(name: str) -> int:
    """After an operator changed limit ``name``: its waiting jobs go back to the queue to be
    decided again under the new values (a rate's set-aside start times were planned under
    the old one), and its keys' next start times reset. Returns how many jobs were woken."""
    from django.db import connection

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            WITH woken AS (
                UPDATE jobs_job
                SET state = 'queued', run_at = statement_timestamp(), limit_wait = '', limit_reserved = false
                WHERE limit_name = %(name)s AND state = 'scheduled' AND limit_wait <> ''
                RETURNING queue_name
            ), keys AS (
                UPDATE jobs_limit_state SET tat = statement_timestamp(), next_slot = statement_timestamp()
                WHERE limit_name = %(name)s
            )
            SELECT count(*), coalesce(array_agg(DISTINCT queue_name), '{}') FROM woken
            """,
            {"name": name},
        )
        count, queues = cursor.fetchone()
        for queue in queues:
            cursor.execute("SELECT pg_notify('jobs_queued', %s)", [queue])
    return int(count)
