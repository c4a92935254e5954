"""The accounts app's emails: which one a signup job sends, its message key, its links.

Links carry tokens, so they are made here when the message is rendered, inside the job
that sends it; the job row holds only a user id and the delivery record only the key.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlencode, urlsafe_base64_encode

from notifications.email import delivery

from .durations import in_words
from .models import Account
from .selectors import is_verified
from .tokens import email_verification_token


def send_signup_email(user: Any, *, job_id: uuid.UUID | str) -> dict[str, Any]:
    """Send the email a signup (or a request for a new link) calls for, once per generation:
    a verification link to an unverified account, or "you already have an account" to a
    verified one. Both are decided here, when the job runs, so every caller enqueues the
    same task whatever the address."""
    account, _ = Account.objects.get_or_create(user=user, defaults={"email_verified_at": user.date_joined})
    if is_verified(user=user):
        return _send_once(
            user,
            purpose="existing_account",
            generation=account.email_generation,
            job_id=job_id,
            variables=lambda: {
                "login_link": site_link(reverse("accounts:login")),
                "reset_link": site_link(reverse("accounts:password_reset")),
            },
        )
    return _send_once(
        user,
        purpose="verify_email",
        generation=account.email_generation,
        job_id=job_id,
        variables=lambda: {
            "link": verification_link(user),
            "valid_for": in_words(settings.ACCOUNTS_VERIFICATION_MAX_AGE),
        },
    )


def send_password_reset_email(user: Any, *, job_id: uuid.UUID | str) -> dict[str, Any]:
    """One reset email per request (its job): a replayed job does not send it again."""
    return _send_once(
        user,
        purpose="password_reset",
        generation=job_id,
        job_id=job_id,
        variables=lambda: {
            "link": password_reset_link(user),
            "valid_for": in_words(settings.PASSWORD_RESET_TIMEOUT),
        },
    )


def _send_once(
    user: Any,
    *,
    purpose: str,
    generation: object,
    job_id: uuid.UUID | str,
    variables: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """The ``purpose`` email (its template has the same name) to the user's current address,
    keyed by user, address and ``generation``: sent once however often it is asked for."""
    record = delivery.prepare(
        message_key=f"{purpose}:{user.pk}:{user.email.lower()}:{generation}",
        purpose=purpose,
        template=purpose,
        to=user.email,
        user=user,
    )
    return delivery.send_once(
        record, job_id=job_id, variables=lambda: {"username": user.get_username(), **variables()}
    )


def verification_link(user: Any) -> str:
    # Tokens ride in the query string, which request and access logs leave out.
    query = urlencode({"u": _uid(user), "t": email_verification_token.make_token(user)})
    return site_link(f"{reverse('accounts:verify')}?{query}")


def password_reset_link(user: Any) -> str:
    query = urlencode({"u": _uid(user), "t": default_token_generator.make_token(user)})
    return site_link(f"{reverse('accounts:password_reset_link')}?{query}")


def site_link(path: str) -> str:
    return f"{settings.SITE_URL}{path}"


def _uid(user: Any) -> str:
    return urlsafe_base64_encode(force_bytes(user.pk))
