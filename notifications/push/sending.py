"""One delivery, run by its job: claim, send, record.

At least once, delivered once: the delivery row is claimed (``sending`` until a deadline)
by one conditional UPDATE before the request goes out, and finished by another after the
answer. A second run of the same job finds it finished and sends nothing, or finds it held
and waits. The window left is a crash after the provider accepted and before the row was
marked: the claim's deadline passes and the next attempt sends again (a duplicate push,
never a lost one).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from django.db import connection
from django.utils import timezone

from jobs.exceptions import Discard, Retry, Snooze

from .conf import push_settings
from .exceptions import ProviderAuthFailed, ProviderMisconfigured
from .models import FINISHED_DELIVERY, DeliveryStatus, Device, Platform, PushDelivery
from .providers import Outcome, PushBackend, PushMessage, SendResult, get_backend

PROVIDER = {Platform.IOS: "APNs", Platform.ANDROID: "FCM"}


@cache
def _claim_statement() -> str:
    return (Path(__file__).resolve().parent / "sql" / "claim_delivery.sql").read_text()


def claim_seconds() -> float:
    """How long a run holds a delivery: a send, one credential refresh and a resend."""
    conf = push_settings()
    return 2 * (conf.CONNECT_TIMEOUT + 2 * conf.REQUEST_TIMEOUT) + 30.0


def deliver(*, delivery_id: str) -> dict[str, Any]:
    """Send one delivery unless it is finished; what the job returns (its result)."""
    try:
        delivery_id = str(uuid.UUID(delivery_id))
    except (TypeError, ValueError, AttributeError) as exc:
        raise Discard(f"{delivery_id!r} is not a delivery id") from exc
    backend = get_backend()
    now = timezone.now()
    claimed = _claim(delivery_id, now)
    if claimed is None:
        return _not_claimed(delivery_id, now)
    platform, device_id, token, app_id, title, body, data, collapse_key, expires_at = claimed
    message = PushMessage(
        id=delivery_id,
        platform=platform,
        token=token,
        app_id=app_id,
        title=title,
        body=body,
        data=json.loads(data) if isinstance(data, str) else data,
        collapse_key=collapse_key,
        expires_at=expires_at,
    )
    return _send(backend, message, device_id=device_id, sent_at=timezone.now())


def _claim(delivery_id: str, now: datetime) -> tuple[Any, ...] | None:
    """The fast path: one statement claims the delivery and reads the message's parts."""
    until = now + timedelta(seconds=claim_seconds())
    with connection.cursor() as cursor:
        cursor.execute(_claim_statement(), {"id": delivery_id, "now": now, "until": until})
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def _not_claimed(delivery_id: str, now: datetime) -> dict[str, Any]:
    """Why the claim found nothing to send, recorded on the delivery where it ends it."""
    delivery = PushDelivery.objects.select_related("notification", "device").filter(id=delivery_id).first()
    if delivery is None:
        return {"status": "missing", "sent": False}
    if delivery.status in FINISHED_DELIVERY:
        return {"status": delivery.status, "sent": False}
    device, notification = delivery.device, delivery.notification
    if device is None:
        return _finish(delivery.id, DeliveryStatus.SKIPPED, reason="device removed")
    if not device.active:
        return _finish(
            delivery.id, DeliveryStatus.SKIPPED, reason=f"device inactive: {device.deactivation_reason}"
        )
    if notification.expires_at is not None and notification.expires_at <= now:
        return _finish(
            delivery.id, DeliveryStatus.EXPIRED, reason=f"expired at {notification.expires_at.isoformat()}"
        )
    # Another run of this job is sending it right now: wait for it, using no attempt.
    until = delivery.sending_until or now
    raise Snooze(max(1.0, (until - now).total_seconds()))


def _send(backend: PushBackend, message: PushMessage, *, device_id: int, sent_at: datetime) -> dict[str, Any]:
    try:
        result = backend.send(message)
    except BaseException:
        # A provider that cannot even be built (a missing key file): let the next attempt in.
        _release(message.id)
        raise
    return _record(message, device_id, result, sent_at=sent_at)


def _record(message: PushMessage, device_id: int, result: SendResult, *, sent_at: datetime) -> dict[str, Any]:
    provider = PROVIDER[Platform(message.platform)]
    answer = {"http_status": result.http_status, "reason": result.reason, "provider_id": result.provider_id}
    if result.outcome is Outcome.DELIVERED:
        return _finish(message.id, DeliveryStatus.DELIVERED, **answer)
    if result.outcome is Outcome.BAD_TOKEN:
        # A registration after the provider learned of the token (or after we sent) wins.
        cutoff = result.invalid_since or sent_at
        deactivated = Device.objects.filter(id=device_id, active=True, last_seen_at__lte=cutoff).update(
            active=False,
            deactivated_at=timezone.now(),
            deactivation_reason=f"{provider} {result.http_status} {result.reason}"[:500],
        )
        outcome = _finish(message.id, DeliveryStatus.FAILED, **answer)
        return {**outcome, "device_deactivated": bool(deactivated)}
    if result.outcome is Outcome.REJECTED:
        _finish(message.id, DeliveryStatus.FAILED, **answer)
        raise Discard(f"{provider} rejected the notification: {result.http_status} {result.reason}")
    # Not sent this time: the delivery waits for the job's next attempt.
    _release(message.id, **answer)
    if result.outcome is Outcome.CONFIG:
        raise ProviderMisconfigured(f"{provider} {result.http_status}: {result.reason}")
    if result.outcome is Outcome.AUTH:
        raise ProviderAuthFailed(f"{provider} refused our credentials: {result.http_status} {result.reason}")
    raise Retry(f"{provider} {result.http_status or 'no answer'}: {result.reason}", after=result.retry_after)


def _release(delivery_id: Any, **answer: Any) -> None:
    PushDelivery.objects.filter(id=delivery_id, status=DeliveryStatus.SENDING).update(
        status=DeliveryStatus.PENDING, sending_until=None, **answer
    )


def _finish(delivery_id: Any, status: DeliveryStatus, **answer: Any) -> dict[str, Any]:
    PushDelivery.objects.filter(id=delivery_id).exclude(status__in=FINISHED_DELIVERY).update(
        status=status, finished_at=timezone.now(), sending_until=None, **answer
    )
    return {"status": status.value, "sent": status == DeliveryStatus.DELIVERED, **answer}
