"""Reads of the job table for views and tools."""

import uuid
from typing import Any

from .models import Job
from .states import TASK_STATUS, State


def job_status(*, job_id: uuid.UUID) -> dict[str, Any] | None:
    """What a client may know about a job: no payload, no traceback."""
    job = (
        Job.objects.filter(id=job_id)
        .only(
            "id", "state", "task_path", "queue_name", "attempt", "max_attempts", "created_at",
            "started_at", "finished_at", "last_error", "result", "run_at", "trace_id",
        )
        .first()
    )
    if job is None:
        return None
    return {
        "id": str(job.id),
        "status": job.state,
        "task_status": TASK_STATUS[State(job.state)].value,
        "task": job.task_path,
        "queue": job.queue_name,
        "trace_id": job.trace_id,
        "attempts": job.attempt,
        "max_attempts": job.max_attempts,
        "created_at": _iso(job.created_at),
        "run_at": _iso(job.run_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "last_error": job.last_error or None,
        "result": job.result if job.state == State.SUCCEEDED else None,
    }


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
