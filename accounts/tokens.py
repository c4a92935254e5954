"""Tokens, one generator per purpose, each with its own salt.

Email verification tokens follow Django's password-reset tokens: a timestamp and an HMAC of
the user's state, nothing stored. The state hashed is the user's id, current address,
signup-email generation and verified time, so a token dies when it is used (verified_at is
set), when a newer link is asked for, when the address changes, and after
ACCOUNTS_VERIFICATION_MAX_AGE. Tokens are made when an email is rendered, inside the job
that sends it, and live only in that email.

API tokens are random secrets; the database keeps their SHA-256 digest (a fast hash is
enough for 256 random bits: there is nothing to guess).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.utils.crypto import constant_time_compare
from django.utils.http import base36_to_int

API_TOKEN_PREFIX = "jq_"  # noqa: S105  (a label, not a secret)


class EmailVerificationTokenGenerator(PasswordResetTokenGenerator):
    key_salt = "accounts.tokens.EmailVerificationTokenGenerator"

    def _make_hash_value(self, user: Any, timestamp: int) -> str:
        account = user.account
        verified = "" if account.email_verified_at is None else account.email_verified_at.isoformat()
        return f"{user.pk}|{(user.email or '').lower()}|{account.email_generation}|{verified}|{timestamp}"

    def check_token(self, user: Any, token: str | None, *, now: datetime | None = None) -> bool:
        """Django's check with this purpose's own lifetime, at ``now`` (naive, like _now())."""
        if not (user and token):
            return False
        try:
            ts_b36, _ = token.split("-")
            timestamp = base36_to_int(ts_b36)
        except ValueError:
            return False
        if not any(
            constant_time_compare(self._make_token_with_timestamp(user, timestamp, secret), token)
            for secret in [self.secret, *self.secret_fallbacks]
        ):
            return False
        age = self._num_seconds(now or self._now()) - timestamp
        return age <= settings.ACCOUNTS_VERIFICATION_MAX_AGE


email_verification_token = EmailVerificationTokenGenerator()


def new_api_token() -> tuple[str, str, str]:
    """A fresh API token: (the token, its display prefix, its digest)."""
    token = API_TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, token[: len(API_TOKEN_PREFIX) + 6], api_token_digest(token)


def api_token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
