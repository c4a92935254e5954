"""The scheduler's writes: a slot's fire record (claimed by the unique (schedule, slot,
seq), then given its outcome and its job), a manual run's mark on the schedule, and the
pruning of old records. Functions take the cursor of the caller's transaction, in which
jobs.scheduler.fire also enqueues the slot's job (invariants 1 and 11)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

# Schedulers LISTEN here; a schedule saved through the model wakes them on commit.
SCHEDULES_CHANNEL = "jobs_schedules"

_CLAIM_SLOT = """
INSERT INTO jobs_firerecord (schedule_id, slot, slot_seq, manual, outcome, fired_at)
SELECT s.id, coalesce(%(slot)s, %(now)s, now()), %(seq)s, %(manual)s, 'enqueued', coalesce(%(now)s, now())
FROM jobs_schedule s
WHERE s.id = %(schedule)s
  -- A schedule disabled or edited since this scheduler read it does not fire here.
  AND (%(manual)s OR (s.enabled AND s.revision = %(revision)s))
ON CONFLICT (schedule_id, slot, slot_seq) WHERE NOT manual DO NOTHING
RETURNING id, slot
"""

# The most recent earlier run that has a job; a pruned job counts as finished.
_PREVIOUS_RUN_UNFINISHED = """
SELECT j.state IN ('queued', 'running')
FROM (SELECT job_id FROM jobs_firerecord
      WHERE schedule_id = %(schedule)s AND id <> %(record)s AND job_id IS NOT NULL
      ORDER BY id DESC LIMIT 1) AS previous
LEFT JOIN jobs_job j ON j.id = previous.job_id
"""

_PRUNE_FIRE_RECORDS = """
DELETE FROM jobs_firerecord WHERE id IN (
    SELECT f.id FROM jobs_firerecord f
    LEFT JOIN jobs_job j ON j.id = f.job_id
    WHERE f.fired_at < coalesce(%(now)s, now()) - %(seconds)s * interval '1 second'
      AND (j.id IS NULL OR j.state NOT IN ('queued', 'running'))
    LIMIT %(batch)s)
"""


def claim_slot(
    cursor: Any,
    *,
    schedule_id: int,
    revision: int,
    slot_at: datetime | None,
    seq: int,
    manual: bool,
    now: datetime | None,
) -> tuple[int, datetime] | None:
    """Insert the slot's fire record: (record id, slot time), or None when another scheduler
    has the slot or the schedule was disabled or edited since ``revision``."""
    cursor.execute(
        _CLAIM_SLOT,
        {
            "schedule": schedule_id,
            "slot": slot_at,
            "seq": seq,
            "manual": manual,
            "now": now,
            "revision": revision,
        },
    )
    row = cursor.fetchone()
    return (row[0], row[1]) if row is not None else None


def previous_run_unfinished(cursor: Any, *, schedule_id: int, record: int) -> bool:
    """Whether the schedule's previous run (before ``record``) has a job queued or running."""
    cursor.execute(_PREVIOUS_RUN_UNFINISHED, {"schedule": schedule_id, "record": record})
    row = cursor.fetchone()
    return bool(row and row[0])


def set_fire_outcome(cursor: Any, *, record: int, outcome: str) -> None:
    cursor.execute("UPDATE jobs_firerecord SET outcome = %s WHERE id = %s", [outcome, record])


def set_fire_job(cursor: Any, *, record: int, job_id: uuid.UUID) -> None:
    cursor.execute("UPDATE jobs_firerecord SET job_id = %s WHERE id = %s", [job_id, record])


def record_manual_fire(cursor: Any, *, schedule_id: int, at: datetime) -> None:
    """A manual run counts as the schedule's last fire, never moving it backwards."""
    cursor.execute(
        "UPDATE jobs_schedule SET last_fired_at = GREATEST(last_fired_at, %s) WHERE id = %s",
        [at, schedule_id],
    )


def prune_fire_records(cursor: Any, *, retention: float, now: datetime | None, batch: int) -> int:
    """Delete, ``batch`` at a time, fire records older than ``retention`` seconds whose job is
    gone or finished; returns the count."""
    deleted = 0
    while True:
        cursor.execute(_PRUNE_FIRE_RECORDS, {"now": now, "seconds": retention, "batch": batch})
        deleted += cursor.rowcount
        if cursor.rowcount < batch:
            return deleted


def notify_changed(cursor: Any, *, name: str) -> None:
    """Wake the schedulers: schedule ``name`` changed (delivered when the transaction commits)."""
    cursor.execute("SELECT pg_notify(%s, %s)", [SCHEDULES_CHANNEL, name])
