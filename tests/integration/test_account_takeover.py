"""Account pre-hijacking: someone signs up first with another person's address. What her
own signup's link confirms is her credentials, and what he registered meanwhile (a session,
an API token, a phone) is cut off; a password reset cuts off the same."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.urls import reverse

from accounts.models import Account, ApiToken
from accounts.services import create_api_token
from notifications.push.models import Device
from notifications.push.services import notify_user
from tests.support.accounts import PASSWORD, run_email_jobs, signup, verified_user
from tests.support.mail import link_in
from tests.support.push.fixtures import apns_token

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("debug_off")]

User = get_user_model()
ATTACKER_PASSWORD = "the-attackers-own-passphrase-13"


@pytest.fixture
def debug_off() -> Any:
    with override_settings(DEBUG=False):
        yield


def login(username: str, password: str) -> Client:
    client = Client()
    client.post(reverse("accounts:login"), {"username": username, "password": password})
    return client


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def register_phone(*, secret: str) -> Any:
    return Client(enforce_csrf_checks=True).post(
        "/api/devices",
        json.dumps({"platform": "ios", "token": apns_token()}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )


def confirm(client: Client, link: str) -> Any:
    return client.post(reverse("accounts:verify"), dict(parse_qsl(urlsplit(link).query)))


def test_the_victims_signup_link_confirms_her_credentials_and_cuts_the_attacker_off(smtp_settings) -> None:
    # The attacker signs up first with her address, then gets a session, an API token and
    # a phone on the unverified account (however he came by them: none needs the mailbox).
    signup(Client(), email="vic@example.com", username="mallory", password=ATTACKER_PASSWORD)
    mallory = User.objects.get(email="vic@example.com")
    attacker = Client()
    attacker.force_login(mallory)
    _, secret = create_api_token(user=mallory, name="attacker's app")
    assert register_phone(secret=secret).status_code == 201
    run_email_jobs()
    [first] = smtp_settings.wait_for("vic@example.com")

    # She signs up with her own name and password; her mail brings a new link.
    victim = Client()
    assert signup(victim, email="vic@example.com", username="vic")["Location"] == reverse(
        "accounts:signup_done"
    )
    run_email_jobs()
    [_, second] = smtp_settings.wait_for("vic@example.com", count=2)
    # The link his signup mailed her confirms nothing any more.
    assert confirm(Client(), link_in(first, "/accounts/verify/?")).status_code == 400
    link = link_in(second, "/accounts/verify/?")
    page = victim.get(f"{urlsplit(link).path}?{urlsplit(link).query}").content.decode()
    assert "signing up as\n    <strong>vic</strong>" in page
    assert confirm(victim, link)["Location"] == reverse("accounts:login")

    [user] = User.objects.filter(email="vic@example.com")
    assert user.pk == mallory.pk and user.get_username() == "vic"
    assert Account.objects.get(pk=user.pk).email_verified_at is not None
    assert logged_in(login("vic@example.com", PASSWORD))
    assert logged_in(login("vic", PASSWORD))
    assert not logged_in(login("vic@example.com", ATTACKER_PASSWORD))
    assert not logged_in(login("mallory", ATTACKER_PASSWORD))
    # His session, token and phone are gone: her pushes do not reach him.
    assert attacker.get("/api/devices").status_code == 401
    assert register_phone(secret=secret).status_code == 401
    assert ApiToken.objects.get().revoked_at is not None
    assert not Device.objects.filter(active=True).exists()
    assert notify_user(user=user, title="Hi", body="For you only") == []


def test_a_password_reset_ends_other_sessions_and_revokes_tokens_and_devices(smtp_settings) -> None:
    user = verified_user(username="ann", email="ann@example.com")
    elsewhere = login("ann", PASSWORD)
    assert logged_in(elsewhere)
    _, secret = create_api_token(user=user, name="old phone")
    assert register_phone(secret=secret).status_code == 201

    Client().post(reverse("accounts:password_reset"), {"email": "ann@example.com"})
    run_email_jobs()
    [message] = smtp_settings.wait_for("ann@example.com")
    client = Client()
    form = client.get(link_in(message, "/accounts/password/reset/confirm/?"), follow=True)
    new = "a-brand-new-passphrase-for-ann-99"
    done = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert done["Location"] == reverse("accounts:password_reset_complete")

    assert elsewhere.get("/api/devices").status_code == 401
    assert register_phone(secret=secret).status_code == 401
    assert not Device.objects.filter(active=True).exists()
    assert logged_in(login("ann", new))
