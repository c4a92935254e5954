"""The demos' activities: fake and deterministic (same input, same output), so a retried
step does the same thing again. Only the user's notification is real: an email through
notifications' delivery records, sent once however often its step runs."""

from __future__ import annotations

import hashlib
from typing import Any

from django.contrib.auth import get_user_model
from django.tasks import TaskContext, task

from notifications.email import delivery


class PaymentRejected(Exception):
    """The approver said no: finalizing is not retried, the payment is refunded."""


def _digest(*parts: object) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:12]


# --- the video pipeline ---------------------------------------------------------------------


@task
def encode(video_id: int) -> dict[str, Any]:
    return {"video": video_id, "file": f"videos/{video_id}-{_digest('encode', video_id)}.mp4", "seconds": 95}


@task
def make_thumbnails(encoded: dict[str, Any], count: int = 3) -> list[str]:
    step = encoded["seconds"] // (count + 1)
    return [f"thumbs/{encoded['video']}-{(i + 1) * step}s.jpg" for i in range(count)]


@task
def transcribe(encoded: dict[str, Any]) -> dict[str, Any]:
    return {"video": encoded["video"], "words": 180, "transcript": f"captions/{encoded['video']}.vtt"}


@task
def process_thumbnails(made: list[Any]) -> dict[str, Any]:
    """Gets [thumbnails, transcription] from the group before it; picks the cover."""
    thumbnails, transcription = made
    return {"video": transcription["video"], "cover": thumbnails[len(thumbnails) // 2],
            "thumbnails": len(thumbnails), "transcript": transcription["transcript"]}  # fmt: skip


@task(takes_context=True)
def notify_user(context: TaskContext, processed: dict[str, Any], user_id: int, title: str) -> dict[str, Any]:
    """Email the uploader that the video is ready: one delivery per video, sent once."""
    user = get_user_model().objects.get(pk=user_id)
    record = delivery.prepare(
        message_key=f"video_ready:{processed['video']}:{user.pk}",
        purpose="video_ready",
        template="video_ready",
        to=user.email,
        user=user,
        variables={"name": user.get_username(), "title": title, "cover": processed["cover"]},
    )
    sent = delivery.send_once(record, job_id=context.task_result.id)
    return {"video": processed["video"], **sent}


# --- the payment approval -------------------------------------------------------------------


@task
def prepare_payment(order_id: int, amount_cents: int) -> dict[str, Any]:
    """Authorize (hold) the amount."""
    return {"order": order_id, "amount_cents": amount_cents, "authorization": f"auth-{_digest(order_id)}"}


@task(non_retryable=(PaymentRejected,))  # type: ignore[call-overload]  # the engine's options are not in the stubs
def finalize_payment(approval: Any, order_id: int) -> dict[str, Any]:
    """Gets the approval signal's payload: capture the held amount, or refuse."""
    if not (isinstance(approval, dict) and approval.get("approved") is True):
        reason = approval.get("reason", "") if isinstance(approval, dict) else ""
        raise PaymentRejected(f"order {order_id} rejected{': ' + reason if reason else ''}")
    return {"order": order_id, "captured": True, "approved_by": approval.get("by", "")}


@task
def refund_payment(order_id: int) -> dict[str, Any]:
    """The compensation of prepare_payment: release the hold."""
    return {"order": order_id, "refunded": True, "refund": f"refund-{_digest('refund', order_id)}"}
