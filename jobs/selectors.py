"""Reads of the job table for views and tools."""

import uuid
from datetime import datetime
from typing import Any

from django.db import connection, connections

from . import files
from .models import Job
from .observe import job_trace
from .ownership import may_see
from .progress import view as progress_view
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
            "public", "expires_at", "progress",
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
        "trace_id": job_trace(job.trace_id, job.id),
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
        status["progress"] = progress_view(job.progress)
        entry = files.file_of(job.id, job.result) if job.state == State.SUCCEEDED else None
        status["file"] = (
            {
                "filename": entry.get("filename"),
                "size": entry.get("size"),
                "download_url": files.download_url(job.id, entry),
            }
            if entry
            else None
        )
    return status


def job_file(*, job_id: uuid.UUID, viewer: Any) -> dict[str, Any] | None:
    """The result file of a succeeded job that ``viewer`` may download (its owner, staff)."""
    job = Job.objects.filter(id=job_id, state=State.SUCCEEDED).only("id", "owner", "result").first()
    if job is None or not may_see(owner=job.owner, public=False, user=viewer):
        return None
    return files.file_of(job.id, job.result)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def paused_queues() -> set[str]:
    """The names of the queues an operator paused."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM jobs_paused_queue")
        return {name for (name,) in cursor.fetchall()}


def recent_task_paths() -> list[str]:
    """Tasks with attempts in the last day (jobs.stats' throughput, a small table)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT task_path FROM jobs_throughput GROUP BY 1 ORDER BY 1 LIMIT 200")
        return [path for (path,) in cursor.fetchall()]


def workers_alive() -> int:
    """``runworker`` processes whose registry row is fresh (dead ones' rows expire)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_worker")
        return int(cursor.fetchone()[0])


def database_now(using: str = "default") -> datetime:
    """The database's clock (invariant 6: it decides what is due)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]
