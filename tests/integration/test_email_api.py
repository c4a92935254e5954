"""POST /api/jobs/email with API tokens: 202, 400, 401, 403, 409; the job belongs to the
token's user, and GET /api/jobs/<id> shows it to that token only."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from accounts import services
from accounts.models import ApiToken
from jobs.models import Job
from notifications.models import EmailDelivery
from tests.support.accounts import run_email_jobs

pytestmark = pytest.mark.django_db

User = get_user_model()
WELCOME = {"to": "ann@example.com", "template": "welcome", "variables": {"name": "Ann"}}


@pytest.fixture
def token() -> str:
    user = User.objects.create_user("billing", "billing@example.com")
    _, secret = services.create_api_token(user=user, name="billing service")
    return secret


def send(body: object, *, token: str | None = None, client: Client | None = None):  # type: ignore[no-untyped-def]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return (client or Client()).post(
        "/api/jobs/email", json.dumps(body), content_type="application/json", **headers
    )


def test_a_token_holder_queues_an_email_and_sees_its_job(token, smtp_settings) -> None:
    response = send(WELCOME, token=token)
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued" and len(body["trace_id"]) == 32
    job = Job.objects.get(id=body["job_id"])
    owner = User.objects.get(username="billing")
    assert job.owner == f"auth.user:{owner.pk}" and not job.public and job.queue_name == "email"
    assert job.trace_id == body["trace_id"]
    # The job carries the delivery's id; the address and variables are on the record.
    delivery = EmailDelivery.objects.get()
    assert job.args == [delivery.pk] and "ann@example.com" not in json.dumps([job.args, job.kwargs])
    assert delivery.owner == job.owner and delivery.job_id == job.id

    run_email_jobs()
    [message] = smtp_settings.wait_for("ann@example.com")
    assert message["Subject"] == "Welcome to jobqueue, Ann"
    status = Client().get(f"/api/jobs/{job.id}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert status.status_code == 200
    assert status.json()["status"] == "succeeded"
    assert status.json()["result"]["provider_message_id"] == message["Message-ID"]


def test_other_callers_cannot_see_the_job(token) -> None:
    job_id = send(WELCOME, token=token).json()["job_id"]
    other = User.objects.create_user("other", "other@example.com")
    _, other_token = services.create_api_token(user=other, name="other")
    assert Client().get(f"/api/jobs/{job_id}").status_code == 404
    assert Client().get(f"/api/jobs/{job_id}", HTTP_AUTHORIZATION=f"Bearer {other_token}").status_code == 404
    assert Client().get(f"/api/jobs/{job_id}", HTTP_AUTHORIZATION="Bearer jq_wrong").status_code == 404


def test_without_valid_credentials_the_answer_is_401_and_nothing_is_queued(token) -> None:
    assert send(WELCOME).status_code == 401
    assert send(WELCOME)["WWW-Authenticate"].startswith("Bearer")
    assert send(WELCOME, token="jq_not-a-token").status_code == 401
    services.revoke_api_tokens(tokens=ApiToken.objects.all())
    revoked = send(WELCOME, token=token)
    assert revoked.status_code == 401 and "revoked" in revoked.json()["error"]
    assert not Job.objects.exists() and not EmailDelivery.objects.exists()


def test_a_token_of_a_deactivated_user_is_refused(token) -> None:
    User.objects.filter(username="billing").update(is_active=False)
    assert send(WELCOME, token=token).status_code == 401


def test_a_staff_session_may_send_with_its_csrf_token_and_others_get_403() -> None:
    staff = User.objects.create_user("ops", "ops@example.com", "pw", is_staff=True)
    member = User.objects.create_user("member", "member@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    assert send(WELCOME, client=client).status_code == 403

    client.force_login(staff)
    no_csrf = send(WELCOME, client=client)
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.json()["error"]
    client.get("/")  # a page with a form sets the csrftoken cookie
    csrf = client.cookies["csrftoken"].value
    ok = client.post(
        "/api/jobs/email", json.dumps(WELCOME), content_type="application/json", HTTP_X_CSRFTOKEN=csrf
    )
    assert ok.status_code == 202
    assert Job.objects.get(id=ok.json()["job_id"]).owner == f"auth.user:{staff.pk}"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({**WELCOME, "to": "not an address"}, "to", "not a valid email address"),
        ({**WELCOME, "to": ["a@example.com"]}, "to", "one email address"),
        ({**WELCOME, "template": "verify_email"}, "template", "must be one of: order_receipt, welcome"),
        ({**WELCOME, "template": "../../etc/passwd"}, "template", "must be one of"),
        ({**WELCOME, "variables": {}}, "variables.name", "required"),
        (
            {**WELCOME, "variables": {"name": "Ann", "link": "http://evil"}},
            "variables.link",
            "no such variable",
        ),
        ({**WELCOME, "variables": {"name": {"nested": 1}}}, "variables.name", "string or a number"),
        ({**WELCOME, "variables": {"name": "a\r\nBcc: x@y"}}, "variables.name", "one line"),
        ({**WELCOME, "variables": {"name": "x" * 201}}, "variables.name", "at most 200"),
        ({**WELCOME, "variables": "Ann"}, "variables", "must be an object"),
        ({**WELCOME, "message_key": ""}, "message_key", "printable string"),
        ({**WELCOME, "cc": "x@example.com"}, "cc", "unknown field"),
    ],
)
def test_bad_requests_get_400_with_the_field_and_queue_nothing(token, body, field, message) -> None:
    response = send(body, token=token)
    assert response.status_code == 400, response.json()
    assert any(message in text for text in response.json()["fields"][field]), response.json()
    assert not Job.objects.exists() and not EmailDelivery.objects.exists()


def test_a_body_that_is_not_json_gets_400(token) -> None:
    response = Client().post(
        "/api/jobs/email", "to=x", content_type="text/plain", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 400 and "application/json" in response.json()["error"]


def test_a_message_key_used_again_gets_409_with_the_first_job(token) -> None:
    first = send({**WELCOME, "message_key": "welcome-ann"}, token=token)
    assert first.status_code == 202
    again = send({**WELCOME, "message_key": "welcome-ann"}, token=token)
    assert again.status_code == 409
    assert again.json()["job_id"] == first.json()["job_id"] and again.json()["error"]
    assert Job.objects.count() == 1 and EmailDelivery.objects.count() == 1


def test_a_message_key_still_gets_409_after_its_job_finished_and_not_after_the_window(
    token, smtp_settings
) -> None:
    first = send({**WELCOME, "message_key": "k1"}, token=token).json()["job_id"]
    run_email_jobs()
    assert Job.objects.get(id=first).state == "succeeded"
    again = send({**WELCOME, "message_key": "k1"}, token=token)
    assert again.status_code == 409 and again.json()["job_id"] == first

    EmailDelivery.objects.update(created_at=timezone.now() - timedelta(minutes=11))
    later = send({**WELCOME, "message_key": "k1"}, token=token)
    assert later.status_code == 202 and later.json()["job_id"] != first


def test_message_keys_belong_to_their_caller(token) -> None:
    other = User.objects.create_user("other", "other@example.com")
    _, other_token = services.create_api_token(user=other, name="other")
    assert send({**WELCOME, "message_key": "same"}, token=token).status_code == 202
    assert send({**WELCOME, "message_key": "same"}, token=other_token).status_code == 202


def test_tokens_are_stored_hashed_and_shown_nowhere(token) -> None:
    row = ApiToken.objects.get()
    assert row.digest != token and len(row.digest) == 64 and token.startswith(row.prefix)
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        assert token not in str(cursor.fetchall())
    send(WELCOME, token=token)
    assert ApiToken.objects.get().last_used_at is not None
