"""Operator actions (console, CLI): ORM guarded UPDATEs on the default connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Func, IntegerField, JSONField, Q, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import JSONObject, Now
from django.utils import timezone

from ..exceptions import JobNotFound, TransitionNotAllowed
from ..ids import id_bound
from ..models import Job, PausedQueue
from ..states import State

# No lease, or one that ran out: nobody may still be running the job.
_NO_LIVE_LEASE = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())


def _guarded_update(
    job_id: uuid.UUID | str, allowed: Iterable[State], *, also: Q | None = None, **values: Any
) -> None:
    allowed = list(allowed)
    rows = Job.objects.filter(id=job_id, state__in=allowed)
    if also is not None:
        rows = rows.filter(also)
    if rows.update(**values):
        return
    found = Job.objects.filter(id=job_id).values_list("state", "lease_expires_at").first()
    if found is None:
        raise JobNotFound(f"no job with id {job_id}")
    state, lease = found
    if state in allowed:
        raise TransitionNotAllowed(
            f"job {job_id} is {state} but its handler may still be running (lease until "
            f"{lease:%Y-%m-%d %H:%M:%S%z}); try again once the lease has run out"
        )
    raise TransitionNotAllowed(f"job {job_id} is {state}; this needs one of {', '.join(allowed)}")


def cancel(job_id: uuid.UUID | str) -> None:
    """Cancel a scheduled or queued job, or ask a running one to stop.

    A running job's attempt holds its concurrency slot, its workflow step's place and its
    lease until it ends, so the cancel is recorded (``cancel_requested_at``) and the job
    stays 'running': its handler can see the request (JobContext.cancel_requested), and the
    attempt's outcome makes it 'cancelled' (a success stays 'succeeded': the work was done),
    as does the reaper if its lease lapses. Asking twice changes nothing."""
    with transaction.atomic():
        pending = Job.objects.filter(id=job_id, state=State.RUNNING)
        if pending.filter(cancel_requested_at__isnull=True).update(cancel_requested_at=Now()) or (
            pending.exists()
        ):
            return
        _guarded_update(job_id, [State.SCHEDULED, State.QUEUED], state=State.CANCELLED, finished_at=Now())


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
    by: str = "",
) -> None:
    """Queue a dead, cancelled or expired job again with fresh attempts, optionally with a
    new payload (checked by the caller: jobs.backend.check_payload). Its error history is
    kept, and the replay is added to ``edits`` (who, when, the state and attempt it ended
    with, and how many errors came before it, so the console can tell the runs of each
    replay apart), with the payload it replaced when there is a new one. An expired job's
    deadline is lifted. The job takes its dedupe key back unless another unfinished job
    holds it now. A job whose lease is still live is refused."""
    fresh: dict[str, Any] = dict(
        state=State.QUEUED, expires_at=None, attempt=0, started_attempt=0, handbacks=0, worker_ids=[],
        worker_id=None, lease_expires_at=None, run_at=Now(), finished_at=None, result=None, progress=None,
        cancel_requested_at=None,
    )  # fmt: skip
    # Built by the guarded UPDATE itself from the row it changes: the state and counts are
    # those the replay ends, and the time is the database's.
    entry: dict[str, Any] = dict(
        at=Now(), by=Value(by), was=F("state"), attempt=F("attempt"),
        errors=Func(F("errors"), function="jsonb_array_length", output_field=IntegerField()),
    )  # fmt: skip
    allowed = [State.DEAD, State.CANCELLED, State.EXPIRED]
    with transaction.atomic():
        if args is not None or kwargs is not None:
            old = Job.objects.select_for_update().filter(id=job_id).values("args", "kwargs").first()
            if old is None:
                raise JobNotFound(f"no job with id {job_id}")
            entry.update(args=Value(old["args"], JSONField()), kwargs=Value(old["kwargs"], JSONField()))
            fresh["args"] = old["args"] if args is None else args
            fresh["kwargs"] = old["kwargs"] if kwargs is None else kwargs
        added = Func(JSONObject(**entry), function="jsonb_build_array", output_field=JSONField())
        fresh["edits"] = CombinedExpression(F("edits"), "||", added)
        try:
            with transaction.atomic():
                _guarded_update(job_id, allowed, also=_NO_LIVE_LEASE, dedupe_lapsed=False, **fresh)
        except IntegrityError:
            # Another unfinished job holds the key now: this one runs without it.
            _guarded_update(job_id, allowed, also=_NO_LIVE_LEASE, dedupe_lapsed=True, **fresh)


def pause_queue(name: str, *, by: str = "") -> bool:
    """Stop every worker claiming from queue ``name`` (at its next claim: within one poll
    interval). Returns False if it was paused already."""
    _, created = PausedQueue.objects.get_or_create(name=name, defaults={"paused_by": by})
    return created


def resume_queue(name: str) -> bool:
    """Let workers claim from queue ``name`` again, and wake them. False if it was not paused."""
    from django.db import connection

    deleted, _ = PausedQueue.objects.filter(name=name).delete()
    if deleted:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify('jobs_queued', %s)", [name])
    return bool(deleted)


def run_now(job_id: uuid.UUID | str) -> None:
    """Make a scheduled job (delayed or waiting for a retry) due at once."""
    _guarded_update(job_id, [State.SCHEDULED, State.QUEUED], state=State.QUEUED, run_at=Now())


def prune(*, retention: dict[State, float], now: datetime | None = None, batch: int = 5000) -> int:
    """Delete finished jobs older than their state's retention (seconds), but not the steps
    of workflows still under way, and their result files (jobs/files.py) once the rows are
    gone. Returns how many jobs.

    The rows are found through the console's index of finished jobs by state and id
    (jobs_job_console_state), in two ranges of ids. A job made after the cutoff cannot have
    finished before it, and ids are time-ordered (jobs.ids), so the first range ends at the
    cutoff's id. The second holds the ids no clock of this century makes: those of jobs made
    before ids were time-ordered (migration 0008). Between the two lies the last retention
    period and a day: a job whose id a producer's clock put there (ahead of the database's)
    is pruned as the cutoff passes it."""
    from django.db import connection

    moment = now or timezone.now()
    made_before_ids_were_ordered = (id_bound(moment + timedelta(days=1)), _LAST_ID)
    deleted = 0
    with connection.cursor() as cursor:
        for state, seconds in retention.items():
            made_before_cutoff = (_FIRST_ID, id_bound(moment - timedelta(seconds=seconds)))
            for low, high in (made_before_cutoff, made_before_ids_were_ordered):
                params = {"state": state, "low": low, "high": high, "now": now, "seconds": seconds}
                deleted += _prune_ids(cursor, params, batch)
    return deleted


# The ends of the id space, for prune's ranges.
_FIRST_ID, _LAST_ID = uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1)


def _prune_ids(cursor: Any, params: dict[str, Any], batch: int) -> int:
    """prune, for one state and one range of ids, ``batch`` rows per statement."""
    from ..files import PREFIX, delete_files

    deleted = 0
    while True:
        cursor.execute(
            """
            DELETE FROM jobs_job WHERE id IN (
                SELECT id FROM jobs_job
                WHERE state = %(state)s
                  AND id >= %(low)s AND id < %(high)s
                  AND finished_at < coalesce(%(now)s, statement_timestamp())
                                    - %(seconds)s * interval '1 second'
                  -- A step of a workflow still under way is kept: a group gathers its
                  -- members' results, a failure compensates finished steps.
                  AND (workflow_node IS NULL OR NOT EXISTS (
                      SELECT 1 FROM jobs_workflow_node n
                      JOIN jobs_workflow w ON w.id = n.workflow_id
                      WHERE n.id = jobs_job.workflow_node
                        AND w.status IN ('running', 'compensating')))
                LIMIT %(batch)s)
            RETURNING id, result #>> '{file,name}'
            """,
            {**params, "batch": batch},
        )
        # Only a job's own folder: a result cannot point pruning at another file.
        names = [
            name for job_id, name in cursor.fetchall() if name and name.startswith(f"{PREFIX}/{job_id}/")
        ]
        count = cursor.rowcount
        deleted += count
        if names:
            # After the rows: a file whose row is still there is never missing. A crash in
            # between leaves a file nobody links to, never the reverse.
            delete_files(names)
        if count < batch:
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
