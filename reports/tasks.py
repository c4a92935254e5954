"""The reports app's jobs: the stages of an import, building a report, the weekly report."""

from __future__ import annotations

from typing import Any

from django.tasks import task

from jobs.progress import JobContext

from . import importing, reporting
from .selectors import WEEKLY_OWNER

# Retried quickly a few times: each stage is idempotent, and a person is watching.
LONG: dict[str, Any] = {"max_attempts": 5, "backoff_base": 2.0, "backoff_cap": 60.0}


@task(takes_context=True, **LONG)
def split_import(context: JobContext, import_id: str) -> dict[str, Any]:
    return importing.split(import_id, context=context)


@task(takes_context=True, **LONG)
def import_chunk(
    context: JobContext, import_id: str, index: int, start: int, end: int, first_line: int
) -> dict[str, Any]:
    return importing.run_chunk(import_id, index, start, end, first_line, context=context)


@task(takes_context=True, **LONG)
def summarize_import(context: JobContext, import_id: str) -> dict[str, Any]:
    return importing.summarize(import_id, job_id=context.task_result.id, context=context)


@task(takes_context=True, **LONG)
def build_report(context: JobContext, kind: str, params: dict[str, Any], user_id: int) -> dict[str, Any]:
    return reporting.build(kind, params, user_id=user_id, job_id=context.task_result.id, context=context)


@task(takes_context=True, **{**LONG, "owner": WEEKLY_OWNER})
def weekly_report(context: JobContext) -> dict[str, Any]:
    """The built-in schedule reports.weekly_job_activity: last week's job activity, and an
    email to each staff member with a link to it."""
    return reporting.weekly(job_id=context.task_result.id, context=context)
