"""Reads of the job table for views and tools."""

import uuid
from typing import Any

from .models import Job
from .observe import trace_id_of
from .ownership import may_see
from .states import TASK_STATUS, State


def job_status(*, job_id: uuid.UUID, viewer: Any = None) -> dict[str, Any] | None:
    """What ``viewer`` (``request.user``) may know about a job, or None if nothing.

    The owner and staff see the status with the result and the last error; anyone holding
    the id of a public job sees its bare status (a signup's job: nothing personal). The
    payload and tracebacks are never shown: they may carry personal data.
    """
    job = (
        Job.objects.filter(id=job_id)
        .only(
            "id", "state", "task_path", "queue_name", "attempt", "max_attempts", "created_at",
            "started_at", "finished_at", "last_error", "result", "run_at", "trace_id", "owner",
            "public", "expires_at",
        )
        .first()
    )  # fmt: skip
    if job is None:
        return None
    full = may_see(owner=job.owner, public=job.public, user=viewer)
    if not full and not job.public:
        return None
    status: dict[str, Any] = {
        "id": str(job.id),
        "status": job.state,
        "task_status": TASK_STATUS[State(job.state)].value,
        "task": job.task_path,
        "queue": job.queue_name,
        "trace_id": trace_id_of(job.trace_id),
        "attempts": job.attempt,
        "max_attempts": job.max_attempts,
        "created_at": _iso(job.created_at),
        "run_at": _iso(job.run_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "expires_at": _iso(job.expires_at),
    }
    if full:
        status["last_error"] = job.last_error or None
        status["result"] = job.result if job.state == State.SUCCEEDED else None
    return status


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
