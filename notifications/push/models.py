"""Devices, notifications and their delivery records.

A notification is written once; each active device of each recipient gets one delivery
record and one job (``tasks.send_push``). The delivery record is the idempotency key of the
side effect (ARCHITECTURE invariant 10): a job that finds its delivery finished does not send.
"""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Platform(models.TextChoices):
    IOS = "ios", "iOS"
    ANDROID = "android", "Android"


class Device(models.Model):
    """One app installation's push token, registered by a signed-in user."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="push_devices")
    platform = models.TextField(choices=Platform.choices)
    # APNs: hex, stored lower-case. FCM: the registration token as issued.
    token = models.TextField()
    # iOS: the bundle id used as apns-topic; Android: the package the token must belong to.
    app_id = models.TextField(blank=True, default="")
    locale = models.TextField(blank=True, default="")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The last registration of this token. A provider's "unregistered since T" only
    # deactivates a device not registered again after T.
    last_seen_at = models.DateTimeField(default=timezone.now)
    deactivated_at = models.DateTimeField(null=True, blank=True)
    deactivation_reason = models.TextField(blank=True, default="")

    class Meta:
        db_table = "notifications_push_device"
        constraints = [
            models.UniqueConstraint(fields=["platform", "token"], name="push_device_token_unique"),
            models.CheckConstraint(
                condition=models.Q(platform__in=Platform.values), name="push_device_platform"
            ),
        ]
        indexes = [
            models.Index(fields=["user"], name="push_device_user_active", condition=models.Q(active=True)),
        ]

    def __str__(self) -> str:
        return f"{self.get_platform_display()} {self.token[:12]}… of {self.user}"


class PushNotification(models.Model):
    """What was sent: the content shared by every delivery of one notify_user(s) call."""

    title = models.TextField()
    body = models.TextField()
    # Custom key/value pairs (strings, as FCM requires) for the app.
    data = models.JSONField(default=dict, blank=True)
    # Deliveries sharing a collapse key replace each other on the device.
    collapse_key = models.TextField(blank=True, default="")
    # Not sent after this (the job ends expired); also the providers' own store-and-forward
    # limit (apns-expiration, FCM ttl).
    expires_at = models.DateTimeField(null=True, blank=True)
    # Who composed it in the admin, and to whom ("all active users", "3 users").
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    audience = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "notifications_push_notification"

    def __str__(self) -> str:
        return self.title


class DeliveryStatus(models.TextChoices):
    # Created with its job; waiting for a worker, or for a retry.
    PENDING = "pending", "Pending"
    # A run holds it until ``sending_until`` (the request is in flight); another run of
    # the same job waits instead of sending a second time.
    SENDING = "sending", "Sending"
    DELIVERED = "delivered", "Delivered"
    # The provider refused it for good: the device's token (the device was deactivated)
    # or the payload (the device is untouched). ``reason`` says which.
    FAILED = "failed", "Failed"
    # Its notification expired before a run could send it.
    EXPIRED = "expired", "Expired"
    # The device was removed or deactivated before the job ran.
    SKIPPED = "skipped", "Skipped"


FINISHED_DELIVERY = frozenset(
    {DeliveryStatus.DELIVERED, DeliveryStatus.FAILED, DeliveryStatus.EXPIRED, DeliveryStatus.SKIPPED}
)


class PushDelivery(models.Model):
    """One notification to one device: its job, and what the provider answered."""

    # Also the apns-id of the request, so Apple's logs and ours name it alike.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    notification = models.ForeignKey(PushNotification, on_delete=models.CASCADE, related_name="deliveries")
    # Kept when the device is deleted, so the history stays; a pending one is then skipped.
    device = models.ForeignKey(
        Device, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    platform = models.TextField(choices=Platform.choices)
    status = models.TextField(choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    # The job that sends it (jobs.Job.id; no foreign key: finished jobs are pruned).
    job_id = models.UUIDField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    # The provider's last answer: HTTP status, reason, and on success its message id
    # (APNs apns-id, FCM message name).
    http_status = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    provider_id = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    sending_until = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "notifications_push_delivery"
        verbose_name_plural = "push deliveries"
        constraints = [
            models.UniqueConstraint(fields=["notification", "device"], name="push_delivery_once_per_device"),
            models.CheckConstraint(
                condition=models.Q(status__in=DeliveryStatus.values), name="push_delivery_status"
            ),
        ]
        indexes = [
            models.Index(fields=["notification", "status"], name="push_delivery_progress"),
            models.Index(fields=["-created_at"], name="push_delivery_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.notification} to {self.get_platform_display()} [{self.status}]"
