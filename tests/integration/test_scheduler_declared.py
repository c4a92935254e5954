"""Code-declared schedules (built-ins, apps, settings) and the built-in tasks."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import tasks
from jobs.models import FireRecord, Job, Schedule, ScheduleSource
from jobs.scheduler import ScheduleSpec, declare, declared
from jobs.scheduler.declared import sync_declared
from jobs.states import State
from tests.integration.test_scheduler_support import BEAT, make_schedule
from tests.support import factories

pytestmark = pytest.mark.django_db

BUILTINS = {"jobs.prune_jobs", "jobs.prune_fire_records"}


@pytest.fixture(autouse=True)
def no_app_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the mechanism: the apps' own declarations (accounts') stay out."""
    monkeypatch.setattr(declared, "_declared", {})


def code_schedules() -> dict[str, Schedule]:
    return {s.name: s for s in Schedule.objects.filter(source=ScheduleSource.CODE)}


def test_built_in_schedules_are_synced_valid_and_marked_as_code(settings) -> None:
    settings.JOBS = {**settings.JOBS, "SCHEDULER_TIME_ZONE": "Asia/Jakarta"}
    assert sync_declared() == {}
    synced = code_schedules()
    assert set(synced) == BUILTINS
    prune = synced["jobs.prune_jobs"]
    assert (prune.task_path, prune.cron, prune.time_zone, prune.queue_name) == (
        "jobs.tasks.prune_jobs",
        "17 3 * * *",
        "Asia/Jakarta",
        "default",
    )
    assert prune.enabled and prune.next_fire_at is not None
    # A second start changes nothing.
    revisions = {name: s.revision for name, s in synced.items()}
    sync_declared()
    assert {name: s.revision for name, s in code_schedules().items()} == revisions


def test_settings_add_replace_and_drop_declarations(settings) -> None:
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULES": {
            "jobs.prune_fire_records": None,
            "jobs.prune_jobs": {"task": "jobs.tasks.prune_jobs", "cron": "0 4 * * *", "time_zone": "UTC"},
            "reports.heartbeat": {"task": BEAT, "interval": 300, "kwargs": {"label": "hb"}, "queue": "low"},
        },
    }
    sync_declared()
    synced = code_schedules()
    assert set(synced) == {"jobs.prune_jobs", "reports.heartbeat"}
    assert synced["jobs.prune_jobs"].cron == "0 4 * * *"
    heartbeat = synced["reports.heartbeat"]
    assert (heartbeat.interval_seconds, heartbeat.kwargs, heartbeat.queue_name) == (
        300,
        {"label": "hb"},
        "low",
    )


def test_invalid_declarations_are_logged_and_not_written(settings, caplog: pytest.LogCaptureFixture) -> None:
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULES": {
            "typo": {"task": BEAT, "cronn": "0 3 * * *"},
            "bad-cron": {"task": BEAT, "cron": "0 3 * *"},
            "bad-zone": {"task": BEAT, "cron": "0 3 * * *", "time_zone": "Europe/Atlantis"},
            "not-a-dict": "0 3 * * *",
            "fine": {"task": BEAT, "cron": "0 3 * * *"},
        },
    }
    with caplog.at_level(logging.ERROR, logger="jobs.scheduler"):
        invalid = sync_declared()
    assert set(invalid) == {"typo", "bad-cron", "bad-zone", "not-a-dict"}
    assert set(code_schedules()) == BUILTINS | {"fine"}
    assert "unknown option(s) cronn" in caplog.text
    assert "invalid cron expression '0 3 * *'" in caplog.text
    assert "unknown time zone 'Europe/Atlantis'" in caplog.text
    assert "must be a dict of schedule options" in caplog.text


def test_the_enabled_flag_belongs_to_the_console_and_survives_a_restart(settings) -> None:
    sync_declared()
    prune = Schedule.objects.get(name="jobs.prune_jobs")
    prune.enabled = False
    prune.save()
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULES": {"jobs.prune_jobs": {"task": "jobs.tasks.prune_jobs", "cron": "0 5 * * *"}},
    }
    sync_declared()
    prune.refresh_from_db()
    assert (prune.enabled, prune.cron) == (False, "0 5 * * *")


def test_a_declaration_removed_from_code_is_deleted_and_a_database_schedule_is_never_overwritten(
    settings,
) -> None:
    settings.JOBS = {**settings.JOBS, "SCHEDULES": {"temporary": {"task": BEAT, "interval": 60}}}
    sync_declared()
    assert "temporary" in code_schedules()
    own = make_schedule("mine", cron="0 1 * * *")
    settings.JOBS = {**settings.JOBS, "SCHEDULES": {"mine": {"task": BEAT, "interval": 5}}}
    sync_declared()
    assert "temporary" not in code_schedules()
    own.refresh_from_db()
    assert (own.source, own.cron, own.interval_seconds) == (ScheduleSource.DATABASE, "0 1 * * *", None)


def test_apps_declare_schedules_through_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(declared, "_declared", {})
    declare(
        ScheduleSpec(
            name="accounts.delete_unverified_signups",
            task=BEAT,
            cron="*/30 * * * *",
            catchup="latest",
            overlap="skip",
        )
    )
    sync_declared()
    hook = Schedule.objects.get(name="accounts.delete_unverified_signups")
    assert (hook.source, hook.cron, hook.catchup, hook.overlap) == (
        ScheduleSource.CODE,
        "*/30 * * * *",
        "latest",
        "skip",
    )


# --- the built-in tasks -----------------------------------------------------------------------


def finished_job(state: State, age: timedelta) -> Job:
    finished = timezone.now() - age
    return Job.objects.create(
        id=factories.made_at(finished),
        task_path=BEAT,
        state=state,
        attempt=1,
        max_attempts=1,
        lease_seconds=60,
        created_at=finished,
        run_at=finished,
        started_at=finished,
        last_attempted_at=finished,
        finished_at=finished,
    )


def queued_job() -> Job:
    now = timezone.now()
    return Job.objects.create(task_path=BEAT, max_attempts=1, lease_seconds=60, created_at=now, run_at=now)


def test_prune_jobs_keeps_each_finished_state_for_its_own_retention(settings) -> None:
    settings.JOBS = {
        **settings.JOBS,
        "RETENTION_SUCCEEDED": 3600,
        "RETENTION_DEAD": 30 * 86400,
        "RETENTION_CANCELLED": 86400,
    }
    keep = [
        finished_job(State.SUCCEEDED, timedelta(minutes=30)),
        finished_job(State.DEAD, timedelta(days=29)),
        finished_job(State.CANCELLED, timedelta(hours=23)),
        queued_job(),
    ]
    finished_job(State.SUCCEEDED, timedelta(hours=2))
    finished_job(State.DEAD, timedelta(days=31))
    finished_job(State.CANCELLED, timedelta(days=2))
    assert tasks.prune_jobs.call() == 3
    assert set(Job.objects.values_list("id", flat=True)) == {j.id for j in keep}


def test_prune_fire_records_keeps_recent_ones_and_those_whose_job_is_unfinished(settings) -> None:
    settings.JOBS = {**settings.JOBS, "RETENTION_FIRE_RECORDS": 86400}
    schedule = make_schedule("old")
    now = timezone.now()
    unfinished = queued_job()
    FireRecord.objects.create(
        schedule=schedule, slot=now - timedelta(days=3), fired_at=now - timedelta(days=3)
    )
    FireRecord.objects.create(
        schedule=schedule,
        slot=now - timedelta(days=2),
        fired_at=now - timedelta(days=2),
        job_id=unfinished.id,
    )
    recent = FireRecord.objects.create(
        schedule=schedule, slot=now - timedelta(hours=1), fired_at=now - timedelta(hours=1)
    )
    assert tasks.prune_fire_records.call() == 1
    assert set(FireRecord.objects.values_list("slot", flat=True)) == {now - timedelta(days=2), recent.slot}
