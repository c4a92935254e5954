"""The two demos as canvases (jobs.workflows), started in the caller's transaction."""

from __future__ import annotations

from jobs.workflows import Workflow, chain, group, step, wait_signal

from . import tasks

APPROVAL_TIMEOUT = 24 * 3600.0


def start_video_pipeline(*, video_id: int, user_id: int, title: str) -> Workflow:
    """encode -> (thumbnails || transcription) -> process thumbnails -> notify the user."""
    return chain(
        step(tasks.encode, video_id),
        group(step(tasks.make_thumbnails), step(tasks.transcribe)),
        step(tasks.process_thumbnails),
        step(tasks.notify_user, user_id, title),
    ).enqueue(name=f"video {video_id}")


def start_payment_approval(
    *, order_id: int, amount_cents: int, timeout: float = APPROVAL_TIMEOUT
) -> Workflow:
    """prepare -> wait for 'approval' (up to a day) -> finalize; refund on rejection or timeout.

    Send the signal with ``jobs.workflows.send_signal(workflow_id, "approval", {"approved":
    True, "by": "ann"})``, from the admin, or ``POST /api/workflows/<id>/signals/approval``."""
    return chain(
        step(tasks.prepare_payment, order_id, amount_cents, compensate=step(tasks.refund_payment, order_id)),
        wait_signal("approval", timeout=timeout),
        step(tasks.finalize_payment, order_id),
    ).enqueue(name=f"payment {order_id}")
