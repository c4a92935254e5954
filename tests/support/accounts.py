"""Helpers for the accounts and email tests: sign up through the real page, run the email
jobs through the real claim and executor code, read the links out of the received mail."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import Client
from django.urls import reverse

from accounts.models import Account
from tests.support import factories

PASSWORD = "a-long-and-unusual-passphrase-42"

# Signups are limited per client IP: each test signup comes from its own address unless
# the test names one.
_client_ips = (f"10.77.{n // 250}.{n % 250 + 1}" for n in itertools.count())


def signup(
    client: Client, *, email: str, username: str, password: str = PASSWORD, ip: str | None = None
) -> Any:
    return client.post(
        reverse("accounts:signup"),
        {"email": email, "username": username, "password1": password, "password2": password},
        REMOTE_ADDR=ip or next(_client_ips),
    )


def fresh_ip() -> str:
    return next(_client_ips)


def run_email_jobs(*, now: datetime | None = None) -> list[dict[str, Any]]:
    return factories.run_due(now=now, queues=("email",))


def verified_user(*, username: str, email: str, password: str = PASSWORD) -> Any:
    from django.utils import timezone

    user = get_user_model().objects.create_user(username=username, email=email, password=password)
    Account.objects.create(user=user, email_verified_at=timezone.now())
    return user


def unverified_user(*, username: str, email: str, password: str = PASSWORD) -> Any:
    user = get_user_model().objects.create_user(username=username, email=email, password=password)
    Account.objects.create(user=user)
    return user


class CountingHasher(MD5PasswordHasher):
    """A fast hasher that counts the hashes it computes (verify computes one too): tests
    compare the work of two branches by count, never by the clock."""

    algorithm = "counting_md5"
    computed = 0

    def encode(self, password: str, salt: str) -> str:
        type(self).computed += 1
        return super().encode(password, salt)


def count_hashes() -> Any:
    """Settings under which every password hash is counted by CountingHasher."""
    from django.test import override_settings

    return override_settings(PASSWORD_HASHERS=["tests.support.accounts.CountingHasher"])
