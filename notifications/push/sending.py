"""One delivery, run by its job: check, claim, send, record.

At least once, delivered once: the delivery row is claimed (``sending`` until a deadline)
by one conditional UPDATE before the request goes out, and finished by another after the
answer. A second run of the same job finds it finished and sends nothing, or finds it held
and waits. The window left is a crash after the provider accepted and before the row was
marked: the claim's deadline passes and the next attempt sends again (a duplicate push,
never a lost one).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from jobs.exceptions import Discard, Retry, Snooze

from .conf import push_settings
from .exceptions import ProviderAuthFailed
from .models import FINISHED_DELIVERY, DeliveryStatus, Device, Platform, PushDelivery
from .providers import Outcome, PushMessage, SendResult, get_backend

PROVIDER = {Platform.IOS: "APNs", Platform.ANDROID: "FCM"}


def claim_seconds() -> float:
    """How long a run holds a delivery: a send, one credential refresh and a resend."""
    conf = push_settings()
    return 2 * (conf.CONNECT_TIMEOUT + 2 * conf.REQUEST_TIMEOUT) + 30.0


def deliver(*, delivery_id: str) -> dict[str, Any]:
    """Send one delivery unless it is finished; what the job returns (its result)."""
    delivery = PushDelivery.objects.select_related("notification", "device").filter(id=delivery_id).first()
    if delivery is None:
        return {"status": "missing", "sent": False}
    if delivery.status in FINISHED_DELIVERY:
        return {"status": delivery.status, "sent": False}
    now = timezone.now()
    device, notification = delivery.device, delivery.notification
    if device is None:
        return _finish(delivery, DeliveryStatus.SKIPPED, reason="device removed")
    if not device.active:
        return _finish(
            delivery, DeliveryStatus.SKIPPED, reason=f"device inactive: {device.deactivation_reason}"
        )
    if notification.expires_at is not None and notification.expires_at <= now:
        return _finish(
            delivery, DeliveryStatus.EXPIRED, reason=f"expired at {notification.expires_at.isoformat()}"
        )
    backend = get_backend()
    if not _claim(delivery, now):
        delivery.refresh_from_db(fields=["status", "sending_until"])
        if delivery.status in FINISHED_DELIVERY:
            return {"status": delivery.status, "sent": False}
        # Another run of this job is sending it right now: wait for it, using no attempt.
        until = delivery.sending_until or now
        raise Snooze(max(1.0, (until - now).total_seconds()))
    sent_at = timezone.now()
    message = PushMessage(
        id=str(delivery.id),
        platform=delivery.platform,
        token=device.token,
        app_id=device.app_id,
        title=notification.title,
        body=notification.body,
        data=notification.data,
        collapse_key=notification.collapse_key,
        expires_at=notification.expires_at,
    )
    try:
        result = backend.send(message)
    except BaseException:
        # A provider that cannot even be built (a missing key file): let the next attempt in.
        _release(delivery)
        raise
    return _record(delivery, device, result, sent_at=sent_at)


def _claim(delivery: PushDelivery, now: datetime) -> bool:
    claimable = Q(status=DeliveryStatus.PENDING) | Q(status=DeliveryStatus.SENDING, sending_until__lt=now)
    until = now + timedelta(seconds=claim_seconds())
    claimed = PushDelivery.objects.filter(claimable, id=delivery.id).update(
        status=DeliveryStatus.SENDING,
        sending_until=until,
        last_attempt_at=now,
        attempts=delivery.attempts + 1,
    )
    return claimed == 1


def _record(
    delivery: PushDelivery, device: Device, result: SendResult, *, sent_at: datetime
) -> dict[str, Any]:
    provider = PROVIDER[Platform(delivery.platform)]
    answer = {"http_status": result.http_status, "reason": result.reason, "provider_id": result.provider_id}
    if result.outcome is Outcome.DELIVERED:
        return _finish(delivery, DeliveryStatus.DELIVERED, **answer)
    if result.outcome is Outcome.BAD_TOKEN:
        # A registration after the provider learned of the token (or after we sent) wins.
        cutoff = result.invalid_since or sent_at
        deactivated = Device.objects.filter(id=device.id, active=True, last_seen_at__lte=cutoff).update(
            active=False,
            deactivated_at=timezone.now(),
            deactivation_reason=f"{provider} {result.http_status} {result.reason}"[:500],
        )
        outcome = _finish(delivery, DeliveryStatus.FAILED, **answer)
        return {**outcome, "device_deactivated": bool(deactivated)}
    if result.outcome is Outcome.REJECTED:
        _finish(delivery, DeliveryStatus.FAILED, **answer)
        raise Discard(f"{provider} rejected the notification: {result.http_status} {result.reason}")
    # Not sent this time: the delivery waits for the job's next attempt.
    _release(delivery, **answer)
    if result.outcome is Outcome.AUTH:
        raise ProviderAuthFailed(f"{provider} refused our credentials: {result.http_status} {result.reason}")
    raise Retry(f"{provider} {result.http_status or 'no answer'}: {result.reason}", after=result.retry_after)


def _release(delivery: PushDelivery, **answer: Any) -> None:
    PushDelivery.objects.filter(id=delivery.id, status=DeliveryStatus.SENDING).update(
        status=DeliveryStatus.PENDING, sending_until=None, **answer
    )


def _finish(delivery: PushDelivery, status: DeliveryStatus, **answer: Any) -> dict[str, Any]:
    PushDelivery.objects.filter(id=delivery.id).exclude(status__in=FINISHED_DELIVERY).update(
        status=status, finished_at=timezone.now(), sending_until=None, **answer
    )
    return {"status": status.value, "sent": status == DeliveryStatus.DELIVERED, **answer}
