"""The development outbox: with no mail server (EMAIL_URL=consolemail://), each email is
kept for the staff page /admin/outbox/ and its text printed decoded, so its links work."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.urls import reverse

from accounts.models import Account
from notifications.email import outbox
from tests.support.accounts import PASSWORD, run_email_jobs, signup, verified_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def outbox_dir(tmp_path: Path, settings) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / "outbox"
    settings.EMAIL_OUTBOX_DIR = str(folder)
    with override_settings(MAILERS={"default": {"BACKEND": outbox.BACKEND}}):
        yield folder


def staff_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("ops", "ops@example.com", "pw", is_staff=True))
    return client


def test_a_signup_in_development_is_in_the_outbox_with_a_link_that_verifies(outbox_dir, capsys) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    signup(client, email="ann@example.com", username="ann")
    [outcome] = run_email_jobs()
    assert outcome["state"] == "succeeded", outcome
    assert len(list(outbox_dir.glob("*.eml"))) == 1

    page = staff_client().get("/admin/outbox/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Confirm your email address for jobqueue" in text and "ann@example.com" in text
    [link] = {
        html.unescape(href) for href in re.findall(r'href="([^"]+)"', text) if "/accounts/verify/?" in href
    }

    # The printed copy carries the same link whole, on one line (no quoted-printable =3D).
    printed = capsys.readouterr().out
    assert link in printed.splitlines() and "=3D" not in printed

    path = link.removeprefix("http://127.0.0.1:8000")
    assert "Confirm my email address" in client.get(path).content.decode()
    confirmed = client.post(reverse("accounts:verify"), dict(parse_qsl(urlsplit(link).query)))
    assert confirmed["Location"] == reverse("accounts:login")
    assert Account.objects.get(user__username="ann").email_verified_at is not None
    logged_in = client.post(reverse("accounts:login"), {"username": "ann", "password": PASSWORD})
    assert logged_in["Location"] == reverse("home")


def test_the_outbox_lists_newest_first(outbox_dir) -> None:  # type: ignore[no-untyped-def]
    for n in range(3):
        verified_user(username=f"u{n}", email=f"u{n}@example.com")
        Client().post(
            reverse("accounts:password_reset"), {"email": f"u{n}@example.com"}, REMOTE_ADDR=f"10.3.0.{n}"
        )
    run_email_jobs()
    assert [message.to for message in outbox.sent_messages()] == [
        "u2@example.com",
        "u1@example.com",
        "u0@example.com",
    ]


def test_the_outbox_page_is_for_staff_only(outbox_dir) -> None:  # type: ignore[no-untyped-def]
    assert Client().get("/admin/outbox/")["Location"].startswith("/admin/login/")
    user = Client()
    user.force_login(verified_user(username="bo", email="bo@example.com"))
    assert user.get("/admin/outbox/")["Location"].startswith("/admin/login/")


def test_there_is_no_outbox_page_when_mail_goes_to_a_server(smtp_settings) -> None:  # type: ignore[no-untyped-def]
    assert staff_client().get("/admin/outbox/").status_code == 404
