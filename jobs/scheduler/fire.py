"""Firing a slot: the fire record and its job, written together in one transaction.

``INSERT ... ON CONFLICT DO NOTHING`` on the unique (schedule, slot, seq) decides which
scheduler fires a slot: the one whose row goes in enqueues the job through the normal
backend path, on the same connection and in the same transaction, so the job exists if and
only if its fire record does (invariants 1 and 11). A scheduler that dies half-way leaves
neither, and another one fires the slot. No lock is held between schedulers; a second
insert of the same slot waits for the first transaction and then does nothing.

A manual run ("run now" in the console) takes the same path with ``manual`` set: it is
recorded in the history and counts as the schedule's previous run for the overlap rule,
but it sits outside the one-per-slot constraint, so it never uses up a scheduled slot.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Value
from django.db.models.functions import Greatest
from django.tasks import Task

from ..models import FireOutcome, Overlap, Schedule
from ..store import schedules
from .cron import Slot
from .validation import check

logger = logging.getLogger("jobs.scheduler")


@dataclass(frozen=True)
class Fired:
    """What became of one slot in this scheduler's hands."""

    slot: Slot
    # enqueued, skipped_overlap, or taken (another scheduler had it, or the schedule changed)
    outcome: str
    job_id: uuid.UUID | None = None


def fire_slot(schedule: Schedule, task: Task, slot: Slot, *, now: datetime | None = None) -> Fired:
    """Fire one scheduled slot unless some scheduler already did."""
    return _fire(schedule, task, slot=slot, manual=False, now=now)


def run_now(schedule: Schedule, *, now: datetime | None = None) -> Fired:
    """Enqueue the schedule's job at once, whatever its timing and overlap policy say.
    Raises InvalidSchedule when the schedule could not fire."""
    return _fire(schedule, check(schedule).task, slot=None, manual=True, now=now)


def _fire(schedule: Schedule, task: Task, *, slot: Slot | None, manual: bool, now: datetime | None) -> Fired:
    with transaction.atomic(), connection.cursor() as cursor:
        row = schedules.claim_slot(
            cursor,
            schedule_id=schedule.pk,
            revision=schedule.revision,
            slot_at=slot.at if slot else None,
            seq=slot.seq if slot else 0,
            manual=manual,
            now=now,
        )
        if row is None:
            assert slot is not None
            return Fired(slot=slot, outcome="taken")
        record, at = row
        slot = slot or Slot(at)
        if (
            not manual
            and schedule.overlap == Overlap.SKIP
            and schedules.previous_run_unfinished(cursor, schedule_id=schedule.pk, record=record)
        ):
            schedules.set_fire_outcome(cursor, record=record, outcome=FireOutcome.SKIPPED_OVERLAP)
            return Fired(slot=slot, outcome=FireOutcome.SKIPPED_OVERLAP)
        # The backend inserts on this connection, inside this transaction (invariant 1).
        result = task.using(queue_name=schedule.queue_name, priority=schedule.priority).enqueue(
            *schedule.args, **schedule.kwargs
        )
        job_id = uuid.UUID(str(result.id))
        schedules.set_fire_job(cursor, record=record, job_id=job_id)
        if manual:
            schedules.record_manual_fire(cursor, schedule_id=schedule.pk, at=slot.at)
    return Fired(slot=slot, outcome=FireOutcome.ENQUEUED, job_id=job_id)


def advance(schedule: Schedule, *, next_fire_at: datetime, last_fired_at: datetime | None) -> bool:
    """Record that every slot before ``next_fire_at`` was dealt with. Never moves the times
    backwards (another scheduler may be ahead), and writes nothing if the schedule was
    edited since it was read: the edit set its own next fire time."""
    changed = Schedule.objects.filter(id=schedule.pk, revision=schedule.revision).update(
        next_fire_at=Greatest("next_fire_at", Value(next_fire_at)),
        last_fired_at=Greatest("last_fired_at", Value(last_fired_at)),
    )
    return bool(changed)


def start_schedule(schedule: Schedule, next_fire_at: datetime) -> datetime:
    """Set the first fire time of a schedule that has none; returns the one that stands."""
    Schedule.objects.filter(id=schedule.pk, revision=schedule.revision, next_fire_at__isnull=True).update(
        next_fire_at=next_fire_at
    )
    stored = Schedule.objects.filter(id=schedule.pk).values_list("next_fire_at", flat=True).first()
    return stored or next_fire_at


def prune_fire_records(*, retention: float, now: datetime | None = None, batch: int = 5000) -> int:
    """Delete fire records older than ``retention`` seconds, except those whose job is still
    unfinished (the overlap rule looks at them). Returns the count."""
    with connection.cursor() as cursor:
        return schedules.prune_fire_records(cursor, retention=retention, now=now, batch=batch)
