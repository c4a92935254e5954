"""Delivery records: one row per email message, claimed before it is sent.

The row's unique ``message_key`` names the message (for a signup email: purpose, user,
address and link generation; for the email API: the accepted request). Whatever runs the
send (a retried job, a duplicate job, an operator's replay) claims the row first and sends
only if the row is not sent yet, so each message is sent once. See delivery.py.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class DeliveryStatus(models.TextChoices):
    # Accepted and not sent yet; also after a failed attempt that will be retried (error set).
    PENDING = "pending", "pending"
    # An attempt holds the claim and is talking to the provider, until claimed_until.
    SENDING = "sending", "sending"
    # The provider accepted it (provider_message_id). Never sent again.
    SENT = "sent", "sent"
    # The provider refused it for good (error says why). Never sent again.
    FAILED = "failed", "failed"


class EmailDelivery(models.Model):
    message_key = models.CharField(max_length=400, unique=True)
    purpose = models.CharField(max_length=50)
    template = models.CharField(max_length=100)
    to_address = models.EmailField(max_length=254)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who asked for it (jobs.ownership key of the API token's user); empty for the site's own.
    owner = models.CharField(max_length=200, blank=True)
    # Email API: the owner's message_key, to answer a repeat within the window with 409.
    request_key = models.CharField(max_length=400, null=True, blank=True)
    # Template variables given by an API caller. The site's own emails store none: their
    # links carry tokens and are built when the message is rendered.
    variables = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    claimed_until = models.DateTimeField(null=True, blank=True)
    # The job that last worked on it (the one that sent it, once sent).
    job_id = models.UUIDField(null=True, blank=True)
    provider_message_id = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "email delivery"
        verbose_name_plural = "email deliveries"
        indexes = [
            models.Index(fields=["request_key", "-created_at"], name="notif_email_request_idx"),
            models.Index(fields=["status", "-created_at"], name="notif_email_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.purpose} to {self.to_address} ({self.status})"
