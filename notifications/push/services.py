"""Writes: device registration, and notifications fanned out to delivery jobs."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from . import validation
from .models import DeliveryStatus, Device, Platform, PushDelivery, PushNotification
from .tasks import send_push

# The engine's named limit each platform's provider calls run under (JOBS["LIMITS"]).
PROVIDER_LIMITS: dict[str, str] = {Platform.IOS.value: "apns", Platform.ANDROID.value: "fcm"}

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Users = Iterable["User"] | QuerySet[Any]


def device_register(
    *, user: User, platform: Any, token: Any, app_id: Any = "", locale: Any = ""
) -> tuple[Device, bool]:
    """Register (or refresh) a device token for ``user``; (device, created).

    A token already known is updated in place: made active again, moved to ``user`` if it
    changed hands (a phone signed into another account), and its ``last_seen_at`` renewed.
    """
    fields = validation.device_fields(platform=platform, token=token, app_id=app_id, locale=locale)
    now = timezone.now()
    # update_or_create locks the row (or, for a new token, retries on the unique
    # constraint), so two registrations of one token at once end as one row.
    return Device.objects.update_or_create(
        platform=fields.platform,
        token=fields.token,
        defaults={
            "user": user,
            "app_id": fields.app_id,
            "locale": fields.locale,
            "active": True,
            "last_seen_at": now,
            "deactivated_at": None,
            "deactivation_reason": "",
        },
        create_defaults={
            "user": user,
            "app_id": fields.app_id,
            "locale": fields.locale,
            "created_at": now,
            "last_seen_at": now,
        },
    )


def device_delete(*, user: User, device_id: int) -> bool:
    """Delete one of ``user``'s devices; False if it is not theirs (or does not exist).
    Its delivery records stay; those still pending end skipped."""
    deleted, _ = Device.objects.filter(id=device_id, user=user).delete()
    return bool(deleted)


def devices_deactivate(*, device_ids: Iterable[int], reason: str) -> int:
    return Device.objects.filter(id__in=list(device_ids), active=True).update(
        active=False, deactivated_at=timezone.now(), deactivation_reason=reason
    )


def user_devices_deactivate(*, user: User, reason: str) -> int:
    """Deactivate every device ``user`` has registered (their credentials changed hands);
    the app registers again once signed in anew."""
    return Device.objects.filter(user=user, active=True).update(
        active=False, deactivated_at=timezone.now(), deactivation_reason=reason
    )


def devices_reactivate(*, device_ids: Iterable[int]) -> int:
    return Device.objects.filter(id__in=list(device_ids), active=False).update(
        active=True, deactivated_at=None, deactivation_reason=""
    )


def notification_send(
    *,
    users: Users,
    title: Any,
    body: Any,
    data: Any = None,
    expires_at: datetime | None = None,
    collapse_key: str | None = None,
    created_by: User | None = None,
    audience: str = "",
    keep_if_empty: bool = True,
) -> tuple[PushNotification | None, list[PushDelivery]]:
    """Write the notification, one delivery per active device of ``users`` and one job per
    delivery, in the caller's transaction: InvalidNotification (or PayloadTooLarge) before
    anything is written if a provider would refuse the content.

    Four statements however many devices: the devices read, the notification, the jobs
    (one bulk insert) and the deliveries (one bulk insert). A job whose notification has
    expired when a worker would start it ends ``expired`` and never sends. With no device
    to reach, the notification is still recorded (the admin shows it) unless
    ``keep_if_empty`` is off.
    """
    content = validation.content(
        title=title, body=body, data=data, expires_at=expires_at, collapse_key=collapse_key
    )
    with transaction.atomic():
        devices = list(
            Device.objects.filter(user__in=users, active=True)
            .order_by("id")
            .values_list("id", "user_id", "platform")
        )
        if not devices and not keep_if_empty:
            return None, []
        notification = PushNotification.objects.create(
            title=content.title,
            body=content.body,
            data=content.data,
            collapse_key=content.collapse_key,
            expires_at=content.expires_at,
            created_by=created_by,
            audience=audience,
        )
        if not devices:
            return notification, []
        ids = [uuid.uuid4() for _ in devices]
        task = send_push.using(expires_at=content.expires_at) if content.expires_at else send_push
        # One statement for every delivery, each under its provider's limit.
        per_platform = {platform: task.using(limit=name) for platform, name in PROVIDER_LIMITS.items()}
        jobs = task.get_backend().bulk_enqueue(
            (per_platform[platform], (str(delivery_id),), {})
            for delivery_id, (_, _, platform) in zip(ids, devices, strict=True)
        )
        deliveries = PushDelivery.objects.bulk_create(
            PushDelivery(
                id=delivery_id,
                notification=notification,
                device_id=device_id,
                user_id=user_id,
                platform=platform,
                status=DeliveryStatus.PENDING,
                job_id=uuid.UUID(job.id),
                created_at=notification.created_at,
            )
            for delivery_id, (device_id, user_id, platform), job in zip(ids, devices, jobs, strict=True)
        )
    return notification, deliveries


def notify_users(
    *,
    users: Users,
    title: str,
    body: str,
    data: dict[str, str] | None = None,
    expires_at: datetime | None = None,
    collapse_key: str | None = None,
) -> list[PushDelivery]:
    """Notify every active device of ``users``; the delivery records (one per device)."""
    _, deliveries = notification_send(
        users=users,
        title=title,
        body=body,
        data=data,
        expires_at=expires_at,
        collapse_key=collapse_key,
        keep_if_empty=False,
    )
    return deliveries


def notify_user(
    *,
    user: User,
    title: str,
    body: str,
    data: dict[str, str] | None = None,
    expires_at: datetime | None = None,
    collapse_key: str | None = None,
) -> list[PushDelivery]:
    """Notify every active device of ``user``; the delivery records (one per device)."""
    return notify_users(
        users=[user], title=title, body=body, data=data, expires_at=expires_at, collapse_key=collapse_key
    )
