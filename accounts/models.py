"""Accounts: signup state beside Django's user, API tokens, and cooldowns.

Users stay ``django.contrib.auth``'s; an ``Account`` row holds what signup adds. Users made
by operators (``createsuperuser``, the admin) have none and count as verified. Email
addresses are unique case-insensitively across all users: the database enforces it with a
unique index on ``lower(auth_user.email)`` (migration 0002), not only the forms.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Account(models.Model):
    """Signup state of a user who signed up on the site."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="account"
    )
    # None until the user confirms a link sent to their address; they cannot log in before.
    email_verified_at = models.DateTimeField(null=True, blank=True)
    # Advanced whenever a new signup email is asked for (a resend, a second signup). It is in
    # the verification token, so only the newest link works, and in the delivery's message
    # key, so each generation is sent exactly once however often its job runs.
    email_generation = models.PositiveIntegerField(default=1)
    # When the newest link was asked for: a never-verified signup is deleted this long after.
    link_requested_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(
                fields=["link_requested_at"],
                condition=models.Q(email_verified_at__isnull=True),
                name="accounts_unverified_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"account of {self.user}"

    @property
    def verified(self) -> bool:
        return self.email_verified_at is not None


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 digest is stored; the token itself
    is shown once, when it is created."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'billing service'.")
    # The token's first characters, so an operator can tell tokens apart without the secret.
    prefix = models.CharField(max_length=12, editable=False)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "API token"
        # Without it, a user who may add tokens adds them only for themselves (accounts/admin.py).
        permissions = [("issue_token_for_others", "Can issue API tokens for other users")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class Cooldown(models.Model):
    """A key (an address, a client IP) that may not ask for the same thing again until
    ``until``. The key is a digest, so the table holds no address in clear."""

    key = models.CharField(max_length=64, primary_key=True)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return f"cooldown {self.key[:12]}… until {self.until:%Y-%m-%d %H:%M:%S}"
