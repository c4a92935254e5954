"""A site that keeps another default task backend and names ours ``jobs``: enqueue, the
worker, results, schedules, workflows and the worker's queues all use the ``jobs`` entry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResultStatus, task_backends
from django.test import override_settings
from django.utils import timezone

from jobs.backend import PostgresBackend, check_payload
from jobs.conf import backend_alias
from jobs.management.commands.runworker import _known_queues
from jobs.metrics import queue_gauges
from jobs.models import Job, Schedule
from jobs.scheduler.fire import run_now
from jobs.scheduler.validation import configured_queues
from jobs.workflows import chain, step
from tests.support import factories
from tests.tasks import basic
from tests.tasks import workflows as wf

from .workflow_support import drive, prepare_effects

pytestmark = pytest.mark.django_db

IMMEDIATE = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
OURS = {"BACKEND": "jobs.backend.PostgresBackend", "QUEUES": ["default", "email"]}


@pytest.fixture(autouse=True)
def site_with_another_default() -> Iterator[None]:
    with override_settings(TASKS={"default": IMMEDIATE, "jobs": OURS}):
        yield


def test_our_backend_is_found_by_its_class_not_its_name() -> None:
    assert backend_alias() == "jobs"
    assert isinstance(task_backends["jobs"], PostgresBackend)


def test_a_job_enqueued_through_using_runs_and_reads_back_on_our_backend() -> None:
    result = basic.add.using(backend="jobs").enqueue(2, 3)
    assert result.backend == "jobs"
    assert Job.objects.get(id=result.id).state == "queued"
    factories.run_due(now=timezone.now())
    assert Job.objects.get(id=result.id).state == "succeeded"
    done = task_backends["jobs"].get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5
    assert done.backend == "jobs" and done.task.backend == "jobs"
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_the_site_default_is_left_alone() -> None:
    immediate = basic.add.enqueue(1, 1)
    assert immediate.backend == "default" and immediate.return_value == 2
    assert not Job.objects.exists()


def test_workers_metrics_and_schedules_read_our_entrys_queues() -> None:
    assert _known_queues() == {"default", "email"}
    assert [gauge["queue"] for gauge in queue_gauges()] == ["default", "email"]
    assert configured_queues() == ["default", "email"]


def test_a_schedule_fires_into_our_backend_not_the_sites_default() -> None:
    schedule = Schedule(name="alias", task_path="tests.tasks.basic.add", args=[4, 5], interval_seconds=60)
    schedule.save()
    fired = run_now(schedule)
    assert Job.objects.get(id=fired.job_id).state == "queued"
    factories.run_due(now=timezone.now())
    assert Job.objects.get(id=fired.job_id).result == 9


def test_a_workflow_runs_on_our_backend() -> None:
    prepare_effects()
    run = chain(step(wf.add.using(backend="jobs"), 1, 2), step(wf.times.using(backend="jobs"), 10)).enqueue()
    drive(run)
    assert run.status == "succeeded" and run.result == 30


def test_the_consoles_replay_check_finds_our_backend() -> None:
    check_payload("tests.tasks.basic.add", [1, 2], {})


def test_two_entries_of_ours_need_the_alias_named() -> None:
    with override_settings(TASKS={"default": OURS, "jobs": OURS}):
        with pytest.raises(ImproperlyConfigured, match="BACKEND_ALIAS"):
            backend_alias()
        with override_settings(JOBS={"BACKEND_ALIAS": "jobs"}):
            assert backend_alias() == "jobs"
