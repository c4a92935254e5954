"""Reads for the accounts app: users by address or login name, verification, API tokens."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.utils.encoding import force_str
from django.utils.http import urlsafe_base64_decode

from .models import Account, ApiToken
from .tokens import api_token_digest, email_verification_token


def normalize_email(email: str) -> str:
    """The form addresses are compared and stored in: trimmed, the local part in NFC and
    lower case, the domain as its IDNA A-label (``exämple.com`` -> ``xn--exmple-cua.com``).

    Lower-casing the local part is not what RFC 5321 says, but it is what every mail
    provider people sign up with does, and it makes "Ann@x" and "ann@x" one account. One
    domain has several Unicode spellings (NFC, NFD, punycode) that reach one mailbox;
    IDNA's mapping (NFKC and case folding) turns them all into one ASCII form."""
    local, at, domain = unicodedata.normalize("NFC", email.strip()).rpartition("@")
    if not at:
        return domain.lower()
    return f"{local.lower()}@{_domain_a_label(domain)}"


def _domain_a_label(domain: str) -> str:
    folded = domain.casefold()
    try:
        # Python's codec (IDNA 2003: nameprep, then punycode) is what Django's own email
        # validator uses for internationalised domains.
        return folded.encode("idna").decode("ascii")
    except UnicodeError:
        return folded  # not a valid domain name; the form's validator has said so already


def user_by_email(*, email: str) -> Any | None:
    return get_user_model().objects.filter(email__iexact=normalize_email(email)).first()


def user_for_login(*, identifier: str) -> Any | None:
    """The user a login form's "username or email" names, if any."""
    identifier = (identifier or "").strip()
    if not identifier:
        return None
    users = get_user_model().objects.select_related("account")
    if "@" in identifier:
        found = users.filter(email__iexact=normalize_email(identifier)).first()
        if found is not None:
            return found
    return users.filter(username=identifier).first()


def user_from_uidb64(*, uidb64: str) -> Any | None:
    try:
        pk = int(force_str(urlsafe_base64_decode(uidb64)))
    except (TypeError, ValueError, OverflowError):
        return None
    return get_user_model().objects.select_related("account").filter(pk=pk).first()


def is_verified(*, user: Any) -> bool:
    """Whether the user may log in: signed up and confirmed, or made by an operator (no
    Account row: createsuperuser, the admin)."""
    try:
        account = user.account
    except Account.DoesNotExist:
        return True
    return account.email_verified_at is not None


def active_api_token(*, token: str) -> ApiToken | None:
    """The unrevoked token of an active user with this value, if any."""
    return (
        ApiToken.objects.select_related("user")
        .filter(digest=api_token_digest(token), revoked_at__isnull=True, user__is_active=True)
        .first()
    )


def user_for_verification(*, uidb64: str, token: str, now: datetime | None = None) -> Any | None:
    """The unverified user a verification link is valid for (at ``now``, naive UTC like
    the token generator's clock), or None."""
    user = user_from_uidb64(uidb64=uidb64)
    if user is None or not hasattr(user, "account") or user.account.email_verified_at is not None:
        return None
    return user if email_verification_token.check_token(user, token, now=now) else None
