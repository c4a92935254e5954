"""POST /api/signup and /api/signup/resend: 202 alike for new and existing addresses,
400 with field errors, 429 with Retry-After for cooldowns; no CSRF token needed."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts.models import Account
from jobs.models import Job
from tests.support.accounts import PASSWORD, unverified_user, verified_user

pytestmark = pytest.mark.django_db

User = get_user_model()


def post(client: Client, path: str, body: object, **extra: str):  # type: ignore[no-untyped-def]
    return client.post(path, json.dumps(body), content_type="application/json", **extra)


def test_new_and_existing_addresses_get_the_same_answer_and_no_job_to_watch() -> None:
    verified_user(username="ann", email="ann@example.com")
    client = Client(enforce_csrf_checks=True)  # no CSRF token: the API needs none
    new = post(
        client,
        "/api/signup",
        {"email": "bo@example.com", "username": "bo", "password": PASSWORD},
        REMOTE_ADDR="10.0.0.1",
    )
    old = post(
        client,
        "/api/signup",
        {"email": "ANN@example.com", "username": "ann2", "password": PASSWORD},
        REMOTE_ADDR="10.0.0.2",
    )
    assert new.status_code == old.status_code == 202
    assert new.json() == old.json() == {"status": "queued"}
    assert not User.objects.filter(username="ann2").exists()
    assert User.objects.get(username="bo").account.email_verified_at is None
    # The jobs are the same task, and private: GET /api/jobs/<id> shows nothing to anyone.
    jobs = list(Job.objects.all())
    assert {job.task_path for job in jobs} == {"accounts.tasks.send_signup_email"}
    assert len(jobs) == 2
    for job in jobs:
        assert not job.public
        assert Client().get(f"/api/jobs/{job.id}").status_code == 404


def test_invalid_input_gets_400_with_field_errors_and_creates_nothing() -> None:
    response = post(Client(), "/api/signup", {"email": "nope", "username": "", "password": "short"})
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert fields["email"] == ["Enter a valid email address."]
    assert fields["username"] == ["This field is required."]
    assert any("too short" in message for message in fields["password"])
    assert not User.objects.exists() and not Job.objects.exists()


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        ("{not json", "application/json", "not valid JSON"),
        ("[1, 2]", "application/json", "must be a JSON object"),
        ("email=a@b.c", "application/x-www-form-urlencoded", "Content-Type: application/json"),
    ],
)
def test_a_body_that_is_not_a_json_object_gets_400_saying_so(
    body: str, content_type: str, message: str
) -> None:
    response = Client().post("/api/signup", body, content_type=content_type)
    assert response.status_code == 400 and message in response.json()["error"]


def test_only_post_is_allowed() -> None:
    assert Client().get("/api/signup").status_code == 405


def test_resend_answers_alike_and_cools_down_per_address_and_per_ip(settings) -> None:
    settings.ACCOUNTS_RESEND_COOLDOWN_ADDRESS = 120
    settings.ACCOUNTS_RESEND_COOLDOWN_IP = 20
    user = unverified_user(username="cy", email="cy@example.com")
    known = post(Client(), "/api/signup/resend", {"email": "cy@example.com"}, REMOTE_ADDR="10.0.0.1")
    unknown = post(Client(), "/api/signup/resend", {"email": "nobody@example.com"}, REMOTE_ADDR="10.0.0.2")
    assert known.status_code == unknown.status_code == 202
    assert known.json() == unknown.json() == {"status": "queued"}
    assert Account.objects.get(pk=user.pk).email_generation == 2

    # The same address from another IP: the address's cooldown.
    again = post(Client(), "/api/signup/resend", {"email": "cy@example.com"}, REMOTE_ADDR="10.0.0.3")
    assert again.status_code == 429
    assert 100 < int(again["Retry-After"]) <= 120 and again.json()["retry_after"] == int(again["Retry-After"])
    # Another address from the same IP: the IP's cooldown. Unknown addresses cool down too.
    same_ip = post(Client(), "/api/signup/resend", {"email": "dee@example.com"}, REMOTE_ADDR="10.0.0.1")
    assert same_ip.status_code == 429 and 0 < int(same_ip["Retry-After"]) <= 20
    unknown_again = post(
        Client(), "/api/signup/resend", {"email": "nobody@example.com"}, REMOTE_ADDR="10.0.0.4"
    )
    assert unknown_again.status_code == 429
    # A refused request changed nothing.
    assert Account.objects.get(pk=user.pk).email_generation == 2
    assert Job.objects.count() == 2


def test_a_cooldown_ends(settings) -> None:
    from accounts import cooldowns

    key = cooldowns.cooldown_key("resend-address", "x@example.com")
    cooldowns.take((key, 60))
    with pytest.raises(cooldowns.CooldownActive):
        cooldowns.take((key, 60))
    cooldowns.take((key, 60), now=timezone.now() + timedelta(seconds=61))
    assert cooldowns.prune(now=timezone.now() + timedelta(seconds=200)) == 1


def test_resend_validates_the_address() -> None:
    response = post(Client(), "/api/signup/resend", {"email": 42})
    assert response.status_code == 400 and "email" in response.json()["fields"]
