"""Schedules that fire every second (real seconds, on the database clock) and the check that
every slot fired exactly once: shared by the scheduler's process tests and the PgBouncer tier."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from jobs.models import FireRecord, Job, Schedule

BEAT = "tests.tasks.scheduled.beat"


def every_second(name: str, **fields: Any) -> Schedule:
    values: dict[str, Any] = {"task_path": BEAT, "time_zone": "UTC", "kwargs": {"label": name}}
    values.update(fields)
    if "cron" not in values:
        values["interval_seconds"] = 1
    schedule = Schedule(name=name, **values)
    schedule.save()
    return schedule


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def slots_by_schedule() -> dict[str, list[datetime]]:
    slots: dict[str, list[datetime]] = {}
    for name, slot in (
        FireRecord.objects.filter(manual=False).order_by("slot").values_list("schedule__name", "slot")
    ):
        slots.setdefault(name, []).append(slot)
    return slots


def assert_one_job_per_slot_without_gaps(names: list[str]) -> dict[str, list[datetime]]:
    slots = slots_by_schedule()
    for name in names:
        fired = slots.get(name, [])
        assert fired, f"{name} never fired"
        expected = [fired[0] + timedelta(seconds=i) for i in range(len(fired))]
        assert fired == expected, f"{name}: gaps or repeats in {fired}"
    records = list(FireRecord.objects.values_list("job_id", flat=True))
    assert None not in records
    assert len(set(records)) == len(records)
    jobs = Counter(Job.objects.values_list("kwargs__label", flat=True))
    per_schedule = {name: len(s) for name, s in slots.items()}
    assert jobs == per_schedule
    return slots
