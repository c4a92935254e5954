"""Helpers for the scheduler's integration tests (this module holds no tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from jobs.models import FireRecord, Job, Schedule
from jobs.scheduler import Scheduler, SchedulerConfig
from jobs.scheduler.cron import Slot

BEAT = "tests.tasks.scheduled.beat"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def make_schedule(name: str, **fields: Any) -> Schedule:
    """A saved schedule whose first fire time the test's clock will set (next tick)."""
    values: dict[str, Any] = {"task_path": BEAT, "time_zone": "UTC", "queue_name": "default"}
    values.update(fields)
    if not values.get("cron") and values.get("interval_seconds") is None:
        values["interval_seconds"] = 60
    schedule = Schedule(name=name, **values)
    schedule.save()
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=None)
    schedule.refresh_from_db()
    return schedule


def scheduler(*, grace: float = 60.0, catchup_limit: int = 100) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_sleep=60.0,
            misfire_grace=timedelta(seconds=grace),
            catchup_limit=catchup_limit,
            listen=False,
        )
    )


def run_clock(runner: Scheduler, start: datetime, end: datetime) -> int:
    """Tick at ``start`` and then exactly at each wake-up time the scheduler asks for, as
    the real process does, until ``end``. Returns the number of passes."""
    now, passes = start, 0
    while now <= end:
        wake = runner.tick(now=now)
        passes += 1
        if wake is None:
            break
        now = wake
    return passes


def fired_slots(schedule: Schedule) -> list[datetime]:
    """The instants of the schedule's fire records (two slots at one instant appear twice)."""
    return [slot.at for slot in fired(schedule)]


def fired(schedule: Schedule) -> list[Slot]:
    """The slots the schedule's fire records stand for, in order."""
    records = FireRecord.objects.filter(schedule=schedule, manual=False).order_by("slot", "slot_seq")
    return [Slot(at, seq) for at, seq in records.values_list("slot", "slot_seq")]


def jobs_of(schedule: Schedule) -> list[Job]:
    ids = FireRecord.objects.filter(schedule=schedule, job_id__isnull=False).values_list("job_id", flat=True)
    return list(Job.objects.filter(id__in=ids))


def start_blocked[T](pool: ThreadPoolExecutor, call: Callable[[], T]) -> Future[T]:
    """Run ``call`` in ``pool`` on that thread's own connection and return once it waits on a
    lock another transaction holds (the caller's, still open). The caller then commits or
    rolls back and reads the result."""
    backend: Future[int] = Future()

    def run() -> T:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend.set_result(cursor.fetchone()[0])
            return call()
        finally:
            connection.close()

    done = pool.submit(run)
    pid = backend.result(timeout=30)
    for _ in range(5000):
        if done.done():
            raise AssertionError(f"finished without waiting on a lock: {done.result()!r}")
        with connection.cursor() as cursor:
            cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid])
            if cursor.fetchone()[0]:
                return done
        threading.Event().wait(0.002)
    raise AssertionError(f"backend {pid} never waited on a lock")
