"""Exactly one send per message: claim the delivery record, send, mark it sent.

Every attempt at a message (a retry, a duplicate job, an operator's replay) goes through
``send_once``:

1. ``claim``: one guarded UPDATE moves the record from ``pending`` (or from a ``sending``
   claim that has lapsed) to ``sending`` with ``claimed_until = now + claim time``. It
   commits at once, so any other attempt sees the claim. A record already ``sent`` or
   ``failed`` is never sent again; while another attempt holds the claim, the job snoozes
   (using no attempt) and looks again a few seconds later.
2. The message is rendered (its links and tokens made now, never stored) and sent.
3. ``sent`` with the provider's id, in one UPDATE fenced by this attempt's number.

The one window left is between the provider accepting the message and step 3 committing:
a crash there (the process killed, the database gone) leaves the record ``sending``, and
once the claim lapses the next attempt sends the message again. Nothing runs in that window
but the UPDATE, and the copy carries the same Message-ID. The claim time
(NOTIFICATIONS_EMAIL_CLAIM_SECONDS) must exceed the sending task's time limit, or a slow
but live send could be claimed and sent by another attempt.

Provider failures put the record back to ``pending`` with the error and re-raise (the job
retries with backoff); a permanent refusal marks it ``failed`` with the reason and ends the
job dead with that reason (``Discard``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Q
from django.db.models.functions import Now
from django.utils import timezone

from jobs.exceptions import Discard, Retry, Snooze

from ..exceptions import PermanentFailure, ProviderBusy
from . import catalog, sending
from .models import DeliveryStatus, EmailDelivery

logger = logging.getLogger("notifications.email")

# How soon an attempt that finds another one sending the message looks again (seconds).
BUSY_RECHECK_SECONDS = 5.0
# Longest error text kept on the record.
MAX_ERROR_LENGTH = 2000


def prepare(
    *,
    message_key: str,
    purpose: str,
    template: str,
    to: str,
    user: Any = None,
    owner: str = "",
    request_key: str | None = None,
    variables: Mapping[str, Any] | None = None,
) -> EmailDelivery:
    """The delivery record of ``message_key``, created pending if it is new."""
    delivery, _ = EmailDelivery.objects.get_or_create(
        message_key=message_key,
        defaults={
            "purpose": purpose,
            "template": template,
            "to_address": to,
            "user": user,
            "owner": owner,
            "request_key": request_key,
            "variables": dict(variables or {}),
        },
    )
    return delivery


def send_once(
    delivery: EmailDelivery,
    *,
    job_id: uuid.UUID | str | None,
    variables: Callable[[], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Send ``delivery`` unless it is sent already; return what happened (the job's result).

    ``variables`` makes the template variables not stored on the record (links with
    tokens); it is called only when this attempt really sends."""
    attempt = claim(delivery, job_id=job_id)
    if attempt is None:
        return _not_claimed(delivery)
    try:
        rendered = catalog.render(
            delivery.template, {**delivery.variables, **(variables() if variables else {})}
        )
        message = sending.build_message(rendered, to=delivery.to_address, message_key=delivery.message_key)
        provider_id = sending.send(message)
    except PermanentFailure as exc:
        _release(delivery, attempt, status=DeliveryStatus.FAILED, error=str(exc))
        logger.warning(
            "event=email_refused delivery=%s purpose=%s error=%r", delivery.pk, delivery.purpose, str(exc)
        )
        raise Discard(f"email permanently refused: {exc}") from exc
    except ProviderBusy as exc:
        _release(delivery, attempt, status=DeliveryStatus.PENDING, error=str(exc))
        raise Retry(str(exc), after=exc.after) from exc
    except Exception as exc:
        _release(delivery, attempt, status=DeliveryStatus.PENDING, error=f"{type(exc).__name__}: {exc}")
        raise
    mark_sent(delivery, attempt, provider_id=provider_id)
    logger.info("event=email_sent delivery=%s purpose=%s attempt=%s", delivery.pk, delivery.purpose, attempt)
    return {"delivery": delivery.pk, "status": DeliveryStatus.SENT, "provider_message_id": provider_id}


def claim(delivery: EmailDelivery, *, job_id: uuid.UUID | str | None) -> int | None:
    """Claim the record for one attempt; return the attempt's number, or None if the record
    is sent, failed, or held by another live attempt. Commits on its own."""
    # The database's clock, as for job leases: senders on several hosts agree on it.
    until = ExpressionWrapper(
        Now() + timedelta(seconds=settings.NOTIFICATIONS_EMAIL_CLAIM_SECONDS), output_field=DateTimeField()
    )
    with transaction.atomic():
        claimed = (
            EmailDelivery.objects.filter(pk=delivery.pk)
            .filter(
                Q(status=DeliveryStatus.PENDING) | Q(status=DeliveryStatus.SENDING, claimed_until__lte=Now())
            )
            .update(
                status=DeliveryStatus.SENDING,
                attempts=F("attempts") + 1,
                claimed_until=until,
                job_id=job_id,
                updated_at=Now(),
            )
        )
    delivery.refresh_from_db()
    return delivery.attempts if claimed else None


def mark_sent(delivery: EmailDelivery, attempt: int, *, provider_id: str) -> None:
    now = timezone.now()
    marked = EmailDelivery.objects.filter(
        pk=delivery.pk, status=DeliveryStatus.SENDING, attempts=attempt
    ).update(
        status=DeliveryStatus.SENT,
        provider_message_id=provider_id[:300],
        sent_at=now,
        claimed_until=None,
        error="",
        updated_at=now,
    )
    if not marked:
        # Only if this attempt outlived its claim and another attempt took the record over.
        logger.error(
            "event=email_claim_lost delivery=%s attempt=%s action='sent, record not ours'",
            delivery.pk,
            attempt,
        )


def _release(delivery: EmailDelivery, attempt: int, *, status: str, error: str) -> None:
    EmailDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.SENDING, attempts=attempt).update(
        status=status, claimed_until=None, error=error[:MAX_ERROR_LENGTH], updated_at=timezone.now()
    )


def _not_claimed(delivery: EmailDelivery) -> dict[str, Any]:
    if delivery.status == DeliveryStatus.SENT:
        return {
            "delivery": delivery.pk,
            "status": DeliveryStatus.SENT,
            "provider_message_id": delivery.provider_message_id,
            "already_sent": True,
        }
    if delivery.status == DeliveryStatus.FAILED:
        raise Discard(f"email permanently refused earlier: {delivery.error}")
    # Another attempt is sending it now. It usually finishes within a second or two, so look
    # again soon (a snooze uses no attempt), and at the latest when its claim runs out.
    remaining = (delivery.claimed_until - timezone.now()).total_seconds() if delivery.claimed_until else 1
    raise Snooze(min(max(1.0, remaining), BUSY_RECHECK_SECONDS))
