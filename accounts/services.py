"""Writes of the accounts app: signup, verification, new links, password resets, tokens.

Every email is sent by a job enqueued in the same transaction as the rows that call for it
(a rollback leaves neither). Signup and new-link requests answer the same way whether or
not the address has an account; the job decides what to send when it runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from . import cooldowns
from .exceptions import AccountsError, CooldownActive, InvalidVerificationLink
from .models import Account, ApiToken
from .selectors import is_verified, normalize_email, user_by_email, user_for_verification
from .tokens import new_api_token

# How often a token's last use is written at most (seconds): not one UPDATE per request.
TOKEN_TOUCH_INTERVAL = 60
# Rows deleted per statement by delete_unverified_signups.
DELETE_BATCH = 500


class UsernameTaken(AccountsError):
    """Another signup took the username between the form's check and the insert."""


def signup(*, email: str, username: str, password: str, client_ip: str) -> None:
    """Sign up, or, for an address that has an account, ask that account for its email.

    Every branch answers alike: one client-IP cooldown (CooldownActive), one password hash,
    the username held for ACCOUNTS_VERIFICATION_MAX_AGE, and one private job of the same
    task. The job sends a link to an unverified account and "you already have an account"
    to a verified one.

    A signup for an unverified address replaces that account's username and password and
    sends a new link (older links die): whoever verifies through the mailbox confirms the
    credentials of the signup that mailed the link, never an earlier signup's (account
    pre-hijacking). Tokens and devices registered meanwhile are revoked.
    """
    from .tasks import send_signup_email

    email = normalize_email(email)
    with transaction.atomic():
        cooldowns.take((cooldowns.cooldown_key("signup-ip", client_ip), settings.ACCOUNTS_RESEND_COOLDOWN_IP))
        hold_username(username)
        user = _user_for_update(email)
        created = None
        if user is None:
            created = _create_unverified(email=email, username=username, password=password)
            # None: a concurrent signup took the address; this one goes on as a later signup.
            user = created or _user_for_update(email)
        if created is not None:
            _cooldown_free("signup-address", email)
        elif user is not None and not is_verified(user=user):
            _replace_credentials(user, username=username, password=password)
        elif user is not None:
            # As much work as the other branches (one password hash), so response times
            # do not tell them apart either.
            make_password(password)
            if _cooldown_free("signup-address", email):
                _advance_generation(user)
        send_signup_email.enqueue(user.pk if user else None)


def hold_username(username: str) -> None:
    """Keep ``username`` from other signups for as long as an unverified signup keeps it,
    whether the signup made an account or found one: a later "username exists" must not
    tell which."""
    cooldowns.hold(_username_key(username), settings.ACCOUNTS_VERIFICATION_MAX_AGE)


def username_held(username: str) -> bool:
    return cooldowns.running(_username_key(username))


def request_signup_email(*, email: str, client_ip: str, now: datetime | None = None) -> None:
    """ "Send me a new link": cooldowns per address and per client IP (CooldownActive), then
    the signup task for whatever account the address has, if any."""
    from .tasks import send_signup_email

    email = normalize_email(email)
    with transaction.atomic():
        cooldowns.take(
            (cooldowns.cooldown_key("resend-ip", client_ip), settings.ACCOUNTS_RESEND_COOLDOWN_IP),
            (cooldowns.cooldown_key("resend-address", email), settings.ACCOUNTS_RESEND_COOLDOWN_ADDRESS),
            now=now,
        )
        user = user_by_email(email=email)
        if user is not None:
            _advance_generation(user)
        send_signup_email.enqueue(user.pk if user else None)


def resend_verification(*, user: Any) -> str:
    """An operator's "re-send verification": a new link (or the existing-account email)."""
    from .tasks import send_signup_email

    with transaction.atomic():
        _advance_generation(user)
        # Public like the site's jobs were: the operator who asked is the only one given its id.
        job = send_signup_email.using(public=True).enqueue(user.pk)
    return job.id


def verify_email(*, uidb64: str, token: str, now: datetime | None = None) -> Any:
    """Confirm a verification link (the confirm page's POST): the account is verified,
    the link dies, and API tokens and push devices registered before it are revoked.
    Raises InvalidVerificationLink for any link that is not valid now."""
    user = user_for_verification(uidb64=uidb64, token=token, now=now)
    if user is None:
        raise InvalidVerificationLink("expired, used, tampered with, superseded or not this account's")
    with transaction.atomic():
        # Guarded: of two confirmations racing, one verifies and the other finds the link used.
        if not Account.objects.filter(pk=user.pk, email_verified_at__isnull=True).update(
            email_verified_at=Now()
        ):
            raise InvalidVerificationLink("already used")
        revoke_access(user=user)
    user.account.refresh_from_db()
    return user


def mark_verified(*, user: Any) -> None:
    """Verify an address by other proof of control (a password reset through it)."""
    Account.objects.filter(pk=user.pk, email_verified_at__isnull=True).update(email_verified_at=Now())


def password_reset_done(*, user: Any) -> None:
    """After a password is set through an emailed link: the address is proven, and what
    the old password let anyone register (API tokens, push devices) is revoked. Sessions
    end by themselves: Django ties each to a hash of the password it logged in with."""
    with transaction.atomic():
        mark_verified(user=user)
        revoke_access(user=user)


def revoke_access(*, user: Any) -> None:
    """Revoke the user's API tokens and deactivate their push devices (credentials changed
    hands: whatever was registered before must register again)."""
    from notifications.push.services import user_devices_deactivate

    revoke_api_tokens(tokens=ApiToken.objects.filter(user=user))
    user_devices_deactivate(user=user, reason="the account's credentials changed")


def request_password_reset(*, email: str, client_ip: str) -> None:
    """Enqueue the reset task for the address, at most once per client IP per
    ACCOUNTS_RESEND_COOLDOWN_IP seconds (CooldownActive) and once per address per
    ACCOUNTS_RESEND_COOLDOWN_ADDRESS seconds (silently). The same private job is enqueued
    whether or not the address has an account; the job decides."""
    from .tasks import send_password_reset_email

    email = normalize_email(email)
    with transaction.atomic():
        cooldowns.take((cooldowns.cooldown_key("reset-ip", client_ip), settings.ACCOUNTS_RESEND_COOLDOWN_IP))
        if not _cooldown_free("reset-address", email):
            return
        user = user_by_email(email=email)
        send_password_reset_email.enqueue(user.pk if user else None)


def create_api_token(*, user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row, and the token itself (kept nowhere: show it now)."""
    token = ApiToken(user=user, name=name)
    return token, issue_api_token(token=token)


def issue_api_token(*, token: ApiToken) -> str:
    """Give an unsaved token row its secret and save it; returns the secret."""
    secret, token.prefix, token.digest = new_api_token()
    token.save()
    return secret


def revoke_api_tokens(*, tokens: Any) -> int:
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=Now())


def touch_api_token(*, token: ApiToken) -> None:
    recent = timezone.now() - timedelta(seconds=TOKEN_TOUCH_INTERVAL)
    ApiToken.objects.filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=recent), pk=token.pk).update(
        last_used_at=Now()
    )


def delete_unverified_signups(*, now: datetime | None = None) -> int:
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.ACCOUNTS_VERIFICATION_MAX_AGE)
    users = get_user_model().objects
    deleted = 0
    while True:
        batch = list(
            users.filter(account__email_verified_at__isnull=True, account__link_requested_at__lt=cutoff)
            .order_by("pk")
            .values_list("pk", flat=True)[:DELETE_BATCH]
        )
        if not batch:
            return deleted
        with transaction.atomic():
            # Checked again under the delete: a link confirmed meanwhile keeps its account.
            _, per_model = users.filter(
                pk__in=batch, account__email_verified_at__isnull=True, account__link_requested_at__lt=cutoff
            ).delete()
        deleted += per_model.get(users.model._meta.label, 0)


def _create_unverified(*, email: str, username: str, password: str) -> Any | None:
    """The new user and its Account, or None if a concurrent signup took the address."""
    try:
        with transaction.atomic():
            user = get_user_model().objects.create_user(username=username, email=email, password=password)
            Account.objects.create(user=user)
    except IntegrityError as exc:
        if user_by_email(email=email) is not None:
            return None
        raise UsernameTaken(f"the username {username!r} was taken just now") from exc
    return user


def _user_for_update(email: str) -> Any | None:
    """The address's user, locked: two signups for one address take turns."""
    return get_user_model().objects.select_for_update().filter(email__iexact=email).first()


def _replace_credentials(user: Any, *, username: str, password: str) -> None:
    """Give an unverified account the newest signup's username and password, and send a
    new link for them. The old username stays held, as if its signup had kept it."""
    old_username = user.get_username()
    user.username = username
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save(update_fields=["username", "password"])
    except IntegrityError as exc:
        raise UsernameTaken(f"the username {username!r} was taken just now") from exc
    hold_username(old_username)
    revoke_access(user=user)
    _advance_generation(user)


def _username_key(username: str) -> str:
    return cooldowns.cooldown_key("username", username.lower())


def _cooldown_free(scope: str, email: str) -> bool:
    """Take the address's cooldown in ``scope`` if it is free; False if it is running."""
    try:
        cooldowns.take((cooldowns.cooldown_key(scope, email), settings.ACCOUNTS_RESEND_COOLDOWN_ADDRESS))
    except CooldownActive:
        return False
    return True


def _advance_generation(user: Any) -> None:
    """Ask for a new signup email: the next generation (a new message, and only the newest
    link works). A signup for an address within its cooldown does not advance it, so its
    job finds the generation already sent and sends nothing new."""
    # Operators' users (no Account row) count as verified; they get one now.
    Account.objects.get_or_create(user=user, defaults={"email_verified_at": user.date_joined})
    Account.objects.filter(pk=user.pk).update(
        email_generation=F("email_generation") + 1, link_requested_at=Now()
    )
