"""Nothing an anonymous caller can see depends on whether an address has an account
(ARCHITECTURE invariant 15): answers, held usernames, password hashes spent, the jobs an
answer points to, and the emails the form and the API send. Per-IP limits on signups and
reset emails; one account per mailbox however its domain is spelled."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.urls import reverse

from accounts.models import Account
from jobs.models import Job
from tests.support.accounts import (
    PASSWORD,
    CountingHasher,
    count_hashes,
    fresh_ip,
    run_email_jobs,
    signup,
    unverified_user,
    verified_user,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("debug_off")]

User = get_user_model()


@pytest.fixture
def debug_off() -> Any:
    with override_settings(DEBUG=False):
        yield


def api(path: str, body: dict[str, Any], *, ip: str | None = None) -> Any:
    return Client().post(
        path, json.dumps(body), content_type="application/json", REMOTE_ADDR=ip or fresh_ip()
    )


def answer(response: Any) -> tuple[int, Any]:
    return response.status_code, response.json()


def three_addresses() -> dict[str, str]:
    """An address with no account, one with an unverified account, one with a verified one."""
    unverified_user(username="unv-owner", email="unv@example.com")
    verified_user(username="ver-owner", email="ver@example.com")
    return {"new": "new@example.com", "unverified": "unv@example.com", "verified": "ver@example.com"}


def test_a_username_is_held_alike_whatever_account_the_address_has() -> None:
    seen = {}
    for state, email in three_addresses().items():
        name = f"pat-{state}"
        body = {"email": email, "username": name, "password": PASSWORD}
        seen[state] = [
            answer(api("/api/signup", body)),
            answer(api("/api/signup", body)),  # the same signup again
            answer(api("/api/signup", {**body, "email": f"other-{state}@example.com"})),
        ]
    assert seen["new"] == seen["unverified"] == seen["verified"]
    assert [status for status, _ in seen["new"]] == [202, 400, 400]


def test_signups_cost_one_password_hash_whatever_account_the_address_has() -> None:
    with count_hashes():
        addresses = three_addresses()
        spent = {}
        for state, email in addresses.items():
            CountingHasher.computed = 0
            response = api("/api/signup", {"email": email, "username": f"q-{state}", "password": PASSWORD})
            spent[state] = (response.status_code, CountingHasher.computed)
    assert spent == {"new": (202, 1), "unverified": (202, 1), "verified": (202, 1)}


def test_a_login_costs_one_password_hash_whatever_the_account() -> None:
    with count_hashes():
        unverified_user(username="unv", email="unv@example.com")
        verified_user(username="ver", email="ver@example.com")
        spent = {}
        for case, (name, password) in {
            "unknown": ("nobody", "wrong-password"),
            "verified, wrong": ("ver", "wrong-password"),
            "unverified, wrong": ("unv", "wrong-password"),
            "unverified, right": ("unv", PASSWORD),
        }.items():
            CountingHasher.computed = 0
            response = Client().post(
                reverse("accounts:login"), {"username": name, "password": password}, REMOTE_ADDR=fresh_ip()
            )
            spent[case] = (response.status_code, CountingHasher.computed)
        assert set(spent.values()) == {(200, 1)}, spent
        # The right password of an unverified account still says how to get a link.
        told = Client().post(reverse("accounts:login"), {"username": "unv", "password": PASSWORD})
        assert "not confirmed yet" in told.content.decode()


@pytest.mark.parametrize("path", ["/api/signup/resend", "/api/signup"])
def test_the_api_points_to_no_job_and_enqueues_the_same_private_one(path: str) -> None:
    seen = {}
    for state, email in three_addresses().items():
        before = set(Job.objects.values_list("id", flat=True))
        body = {"email": email}
        if path == "/api/signup":
            body.update(username=f"r-{state}", password=PASSWORD)
        response = api(path, body)
        [job] = Job.objects.exclude(id__in=before)
        assert Client().get(f"/api/jobs/{job.id}").status_code == 404  # nothing to watch
        seen[state] = (answer(response), job.task_path, job.public, job.queue_name)
    assert seen["new"] == seen["unverified"] == seen["verified"]
    assert seen["new"][0] == (202, {"status": "queued"})


def test_a_reset_request_enqueues_the_same_private_job_for_any_address() -> None:
    seen = {}
    for state, email in three_addresses().items():
        before = set(Job.objects.values_list("id", flat=True))
        response = Client().post(reverse("accounts:password_reset"), {"email": email}, REMOTE_ADDR=fresh_ip())
        [job] = Job.objects.exclude(id__in=before)
        seen[state] = (response.status_code, response["Location"], job.task_path, job.public)
    assert seen["new"] == seen["unverified"] == seen["verified"]


@pytest.mark.parametrize("channel", ["form", "api"])
def test_the_form_and_the_api_send_an_existing_address_the_same_email(channel: str, smtp_settings) -> None:
    verified_user(username="hal", email="hal@example.com")
    if channel == "form":
        signup(Client(), email="hal@example.com", username="someone")
    else:
        api("/api/signup", {"email": "hal@example.com", "username": "someone", "password": PASSWORD})
    run_email_jobs()
    [notice] = smtp_settings.wait_for("hal@example.com")
    assert notice["Subject"] == "You already have a jobqueue account"


def test_signups_are_limited_per_client_ip(settings) -> None:
    settings.ACCOUNTS_RESEND_COOLDOWN_IP = 20
    first = api(
        "/api/signup", {"email": "a1@example.com", "username": "a1", "password": PASSWORD}, ip="10.1.1.1"
    )
    second = api(
        "/api/signup", {"email": "a2@example.com", "username": "a2", "password": PASSWORD}, ip="10.1.1.1"
    )
    assert first.status_code == 202
    assert second.status_code == 429 and 0 < int(second["Retry-After"]) <= 20
    form = signup(Client(), email="a3@example.com", username="a3", ip="10.1.1.1")
    assert form.status_code == 429 and "Please wait" in form.content.decode()
    assert list(User.objects.values_list("username", flat=True)) == ["a1"]
    # Another client is not held up.
    assert (
        api("/api/signup", {"email": "a4@example.com", "username": "a4", "password": PASSWORD}).status_code
        == 202
    )


def test_reset_emails_are_limited_per_client_ip(settings) -> None:
    settings.ACCOUNTS_RESEND_COOLDOWN_IP = 20
    for n in range(3):
        verified_user(username=f"u{n}", email=f"u{n}@example.com")
    answers = [
        Client().post(
            reverse("accounts:password_reset"), {"email": f"u{n}@example.com"}, REMOTE_ADDR="10.2.2.2"
        )
        for n in range(3)
    ]
    assert [response.status_code for response in answers] == [302, 429, 429]
    assert int(answers[1]["Retry-After"]) > 0 and "Please wait" in answers[1].content.decode()
    assert Job.objects.filter(task_path="accounts.tasks.send_password_reset_email").count() == 1


def test_one_mailbox_is_one_account_however_its_domain_is_spelled(smtp_settings) -> None:
    spellings = [
        unicodedata.normalize("NFC", "Alice@exämple.com"),
        unicodedata.normalize("NFD", "Alice@exämple.com"),
        "alice@xn--exmple-cua.com",
        "ALICE@EXÄMPLE.COM",
    ]
    for n, email in enumerate(spellings):
        assert signup(Client(), email=email, username=f"alice{n}").status_code == 302
    [user] = User.objects.all()
    assert user.email == "alice@xn--exmple-cua.com"
    # Every spelling finds it: a new link, a reset, a login.
    User.objects.filter(pk=user.pk).update(is_active=True)

    Account.objects.filter(pk=user.pk).update(email_verified_at="2026-01-01T00:00:00Z")
    login = Client().post(
        reverse("accounts:login"),
        {"username": unicodedata.normalize("NFD", "alice@exämple.com"), "password": PASSWORD},
    )
    assert login.status_code == 302
    Client().post(reverse("accounts:password_reset"), {"email": "Alice@EXÄMPLE.com"})
    assert Job.objects.filter(task_path="accounts.tasks.send_password_reset_email", args=[user.pk]).exists()
