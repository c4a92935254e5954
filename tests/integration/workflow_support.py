"""Helpers for the workflow tests: run a workflow's jobs with a moving clock."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Min
from django.utils import timezone

from jobs.models import Job
from jobs.workflows import Workflow
from tests.support import factories


def clock() -> datetime:
    """A reading after everything enqueued so far is due."""
    return timezone.now() + timedelta(seconds=1)


def effects() -> list[str]:
    """Side effects in the order they happened."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM test_side_effects ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def prepare_effects() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS test_side_effects "
            "(id bigserial PRIMARY KEY, key text NOT NULL, at timestamptz DEFAULT now())"
        )
        cursor.execute("DELETE FROM test_side_effects")


def drive(run: Workflow, *, now: datetime | None = None, limit: int = 200) -> datetime:
    """Run due jobs, one batch at a time, moving the clock to the next retry when nothing is
    due, until the workflow finishes or nothing is left to run. Returns the clock."""
    now = now or clock()
    for _ in range(limit):
        if factories.run_due(now=now, limit=200):
            continue
        if run.refresh().finished:
            return now
        later = Job.objects.filter(state="scheduled").aggregate(at=Min("run_at"))["at"]
        if later is None:
            return now
        now = max(now, later)
    raise AssertionError(f"workflow {run.id} did not settle in {limit} rounds")
