"""The job that sends an email accepted by the email API (its record holds the message)."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task

from .delivery import send_once
from .models import EmailDelivery

# Retry shape shared by every email task: a mail server that is down for an hour still gets
# the message (about 1 + 2 + 4 ... minutes, capped at 30), and an attempt that hangs is
# killed after 60 s, well within NOTIFICATIONS_EMAIL_CLAIM_SECONDS. Every email task shares
# the provider's request rate: the named limit "email" (JOBS_LIMIT_EMAIL_RATE), across
# all workers, so the provider's own 429s stay rare (and are still retried when they come).
EMAIL_TASK_OPTIONS: dict[str, Any] = {
    "queue_name": "email",
    "limit": "email",
    "max_attempts": 10,
    "backoff_base": 60.0,
    "backoff_cap": 1800.0,
    "timeout": 60.0,
}


@task(takes_context=True, **EMAIL_TASK_OPTIONS)
def send_email(context: TaskContext, delivery_id: int) -> dict[str, Any]:
    delivery = EmailDelivery.objects.filter(pk=delivery_id).first()
    if delivery is None:
        return {"delivery": delivery_id, "status": "missing"}
    return send_once(delivery, job_id=context.task_result.id)
