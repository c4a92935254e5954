"""Reads for the reports and imports pages and API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db.models import Max
from django.utils.translation import ngettext

from jobs import files
from jobs.models import Job
from jobs.ownership import owner_key
from jobs.progress import percent
from jobs.selectors import job_status
from jobs.states import State

from .models import Import, ImportStatus

REPORT_TASK = "reports.tasks.build_report"
# The weekly report's jobs are owned by this key (staff see them), so that the owner index
# finds them.
WEEKLY_OWNER = "reports:weekly"


def _may_see(record: Import, viewer: Any) -> bool:
    if getattr(viewer, "is_staff", False) and getattr(viewer, "is_active", False):
        return True
    return bool(getattr(viewer, "is_authenticated", False)) and record.owner_id == viewer.pk


def import_status(*, import_id: uuid.UUID, viewer: Any) -> dict[str, Any] | None:
    """An import as its owner (or staff) sees it: progress summed over its chunks."""
    record = Import.objects.filter(id=import_id).first()
    if record is None or not _may_see(record, viewer):
        return None
    if record.status == ImportStatus.QUEUED:
        progress = {"done": 0, "total": None, "percent": None, "message": "waiting to be read"}
        updated_at = record.created_at
    else:
        total = record.total_rows or 0
        done = record.rows_done
        if record.status == ImportStatus.FINISHED:
            message = "finished"
            if record.unread:
                message += ngettext(
                    "; %(count)d row could not be read", "; %(count)d rows could not be read", record.unread
                ) % {"count": record.unread}
        else:
            # Set by the split, which also moves the import past QUEUED.
            chunks = record.chunk_count or 0
            message = ngettext(
                "%(done)d of %(count)d chunk done", "%(done)d of %(count)d chunks done", chunks
            ) % {"done": record.chunks_done, "count": chunks}
        progress = {
            "done": done,
            "total": total,
            "percent": percent(min(done, total), total),
            "message": message,
        }
        updated_at = (
            record.finished_at or record.chunks.aggregate(at=Max("done_at"))["at"] or record.created_at
        )
    progress["updated_at"] = updated_at.isoformat()
    rejected_file = _rejected_file(record)
    status = record.status
    if status == ImportStatus.FINISHED and record.rejected and rejected_file is None:
        # The summary's handler has finished the import, and its file of rejected rows is
        # linked once the worker records that job's outcome (moments later): until then the
        # import is still running, so that a reader polling for "finished" gets the link.
        status = ImportStatus.RUNNING
    return {
        "id": str(record.id),
        "filename": record.filename,
        "size": record.size,
        "status": status,
        "job_id": str(record.job_id) if record.job_id else None,
        "created_at": record.created_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "progress": progress,
        "counts": {
            "rows": record.rows_done,
            "inserted": record.inserted,
            "updated": record.updated,
            "unchanged": record.unchanged,
            "rejected": record.rejected,
            "unread": record.unread,
        },
        "rejected_file": rejected_file,
    }


def _rejected_file(record: Import) -> dict[str, Any] | None:
    if record.status != ImportStatus.FINISHED or record.summary_job_id is None:
        return None
    job = Job.objects.filter(id=record.summary_job_id, state=State.SUCCEEDED).only("id", "result").first()
    entry = files.file_of(job.id, job.result) if job is not None else None
    if job is None or entry is None:
        return None
    return {
        "filename": entry["filename"],
        "size": entry["size"],
        "download_url": files.download_url(job.id, entry),
    }


def recent_imports(*, user: Any, limit: int = 8) -> list[dict[str, Any]]:
    ids = Import.objects.filter(owner=user).order_by("-created_at").values_list("id", flat=True)[:limit]
    return [status for import_id in ids if (status := import_status(import_id=import_id, viewer=user))]


def recent_reports(*, user: Any, limit: int = 8) -> list[dict[str, Any]]:
    """The user's latest reports (and, for staff, the weekly ones), newest first."""
    jobs = Job.objects.filter(task_path=REPORT_TASK, owner=owner_key(user))
    if user.is_staff:
        jobs = jobs | Job.objects.filter(owner=WEEKLY_OWNER)
    found = []
    for job_id, args in jobs.order_by("-created_at").values_list("id", "args")[:limit]:
        status = job_status(job_id=job_id, viewer=user)
        if status is not None:
            kind = args[0] if args and task_kind_known(args[0]) else "job_activity"
            rows = (status.get("result") or {}).get("rows")
            found.append(
                {
                    **status,
                    "kind": kind,
                    "asked": datetime.fromisoformat(status["created_at"]),
                    "rows": f"{rows:,}" if isinstance(rows, int) else "",
                }
            )
    return found


def task_kind_known(kind: object) -> bool:
    from .reporting import KINDS

    return isinstance(kind, str) and kind in KINDS
