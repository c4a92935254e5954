"""The engine's own tasks, run by its built-in schedules (jobs/scheduler/declared.py)."""

from django.tasks import task

from . import store
from .conf import jobs_settings
from .states import State


@task(priority=-50)
def prune_jobs() -> int:
    """Delete finished jobs past their state's retention (JOBS["RETENTION_*"]), and finished
    workflows past the same (failed ones as long as dead jobs). Returns rows deleted."""
    from django.db import connection

    from .store.workflows import prune_workflows

    conf = jobs_settings()
    jobs = store.prune(
        retention={
            State.SUCCEEDED: conf.RETENTION_SUCCEEDED,
            State.DEAD: conf.RETENTION_DEAD,
            State.CANCELLED: conf.RETENTION_CANCELLED,
        }
    )
    with connection.cursor() as cursor:
        workflows = prune_workflows(
            cursor,
            retention={
                "succeeded": conf.RETENTION_SUCCEEDED,
                "failed": conf.RETENTION_DEAD,
                "cancelled": conf.RETENTION_CANCELLED,
            },
        )
    return jobs + workflows


@task(priority=-50)
def prune_fire_records() -> int:
    """Delete schedule fire records older than JOBS["RETENTION_FIRE_RECORDS"]."""
    from .scheduler.fire import prune_fire_records as prune

    return prune(retention=jobs_settings().RETENTION_FIRE_RECORDS)
