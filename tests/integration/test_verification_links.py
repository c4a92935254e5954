"""Verification links that must not work: expired, used, tampered with, another user's,
for an address that changed, superseded by a newer link. All get one generic page."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts import services
from accounts.models import Account
from accounts.tokens import email_verification_token
from tests.support.accounts import unverified_user

pytestmark = pytest.mark.django_db

GENERIC = "This link does not work"


def params(user, token: str | None = None, uid: str | None = None) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {
        "u": uid or urlsafe_base64_encode(force_bytes(user.pk)),
        "t": email_verification_token.make_token(user) if token is None else token,
    }


def get_and_post(query: dict[str, str]):  # type: ignore[no-untyped-def]
    path = reverse("accounts:verify")
    return Client().get(path, query), Client().post(path, query)


def confirm(query: dict[str, str]):  # type: ignore[no-untyped-def]
    return Client().post(reverse("accounts:verify"), query)


def assert_generic_refusal(query: dict[str, str], user) -> None:  # type: ignore[no-untyped-def]
    for response in get_and_post(query):
        assert response.status_code == 400
        body = response.content.decode()
        assert GENERIC in body and "Send me a new link" in body
    assert Account.objects.get(pk=user.pk).email_verified_at is None


@pytest.fixture
def ann():  # type: ignore[no-untyped-def]
    return unverified_user(username="ann", email="ann@example.com")


def test_a_good_link_works_once(ann) -> None:
    query = params(ann)
    get, _ = get_and_post({})  # no link at all
    assert get.status_code == 400
    assert Client().get(reverse("accounts:verify"), query).status_code == 200
    assert confirm(query).status_code == 302
    assert Account.objects.get(pk=ann.pk).email_verified_at is not None
    for response in get_and_post(query):
        assert response.status_code == 400 and GENERIC in response.content.decode()


def test_an_expired_link_is_refused(ann, settings) -> None:
    class Yesterday(type(email_verification_token)):  # type: ignore[misc]
        def _now(self) -> datetime:
            return email_verification_token._now() - timedelta(
                seconds=settings.ACCOUNTS_VERIFICATION_MAX_AGE + 60
            )

    old = Yesterday().make_token(ann)
    assert email_verification_token.check_token(ann, old) is False
    assert_generic_refusal(params(ann, old), ann)
    # The same token was good while it was young.
    young = email_verification_token._now() - timedelta(days=3)
    assert email_verification_token.check_token(ann, old, now=young) is True


@pytest.mark.parametrize(
    "tamper",
    [
        lambda token: token[:-1] + ("0" if token[-1] != "0" else "1"),
        lambda token: "zzzzzz-" + token.split("-")[1],
        lambda token: "no-dash-here",
    ],
)
def test_a_tampered_link_is_refused(ann, tamper) -> None:
    token = tamper(email_verification_token.make_token(ann))
    assert_generic_refusal(params(ann, token), ann)


def test_another_users_token_does_not_verify_this_user(ann) -> None:
    bo = unverified_user(username="bo", email="bo@example.com")
    assert_generic_refusal(params(ann, email_verification_token.make_token(bo)), ann)
    assert Account.objects.get(pk=bo.pk).email_verified_at is None


def test_a_link_for_an_unknown_or_garbled_user_is_refused(ann) -> None:
    for uid in ("OTk5OTk", "!!!", urlsafe_base64_encode(b"not-a-number")):
        assert confirm(params(ann, uid=uid)).status_code == 400


def test_a_link_dies_when_the_address_changes(ann) -> None:
    query = params(ann)
    ann.email = "ann.new@example.com"
    ann.save()
    assert_generic_refusal(query, ann)


def test_asking_for_a_new_link_supersedes_the_old_one(ann) -> None:
    old = params(ann)
    services.resend_verification(user=ann)
    ann.account.refresh_from_db()
    assert_generic_refusal(old, ann)
    assert confirm(params(ann)).status_code == 302


def test_an_operators_user_without_signup_state_has_no_link_to_confirm() -> None:
    from django.contrib.auth import get_user_model

    ops = get_user_model().objects.create_user("ops", "ops@example.com")
    assert confirm(params(ops, token="a-b")).status_code == 400
