"""The two demos end to end on real PostgreSQL (and a real SMTP server on loopback), the
signal API, and the console's workflow pages."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse

from demos.workflows import start_payment_approval, start_video_pipeline
from jobs.models import Job
from jobs.store import workflows as workflow_store
from jobs.workflows import Workflow, chain, group, step, wait_signal
from notifications.email.models import EmailDelivery
from tests.support import factories
from tests.tasks import workflows as t

from .workflow_support import clock, drive, prepare_effects

pytestmark = pytest.mark.django_db

TOKEN = "signal-token-for-tests"


@pytest.fixture
def staff() -> Client:
    user = get_user_model().objects.create_user(
        "ops", "ops@example.com", "pw", is_staff=True, is_superuser=True
    )
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_the_video_pipeline_notifies_the_user_once(smtp_settings) -> None:
    user = get_user_model().objects.create_user("ann", "ann@example.com", "pw")
    run = start_video_pipeline(video_id=42, user_id=user.pk, title="Holiday")
    drive(run)
    assert run.status == "succeeded", run.error
    assert run.result["status"] == "sent"
    order = [n.label.rsplit(".", 1)[1] for n in run.steps()]
    assert order == ["encode", "make_thumbnails", "transcribe", "process_thumbnails", "notify_user"]
    processed = run.steps()[3].result
    assert processed == {"video": 42, "cover": "thumbs/42-46s.jpg", "thumbnails": 3,
                         "transcript": "captions/42.vtt"}  # fmt: skip
    [message] = smtp_settings.wait_for("ann@example.com")
    assert message["Subject"] == 'Your video "Holiday" is ready'
    # The notify step again (a retry after a lost outcome): the delivery says it was sent.
    again = run_notify_again(run)
    assert again["status"] == "sent"
    assert len(smtp_settings.messages("ann@example.com")) == 1
    assert EmailDelivery.objects.filter(purpose="video_ready").count() == 1


def run_notify_again(run: Workflow) -> dict:
    """The notify step's call once more, as a run after a lost outcome would make it."""
    from demos.tasks import notify_user

    notify = Job.objects.get(id=run.steps()[4].job_id)
    again = notify_user.enqueue(*notify.args, **notify.kwargs)
    factories.run_due(now=clock())
    return Job.objects.get(id=again.id).result


@pytest.mark.parametrize(
    ("approval", "status", "refunded"),
    [
        ({"approved": True, "by": "ann"}, "succeeded", False),
        ({"approved": False, "reason": "fraud"}, "failed", True),
    ],
)
def test_the_payment_is_finalized_when_approved_and_refunded_when_rejected(
    approval, status, refunded
) -> None:
    run = start_payment_approval(order_id=7, amount_cents=1999)
    drive(run)
    assert run.status == "running", "waiting for the approval"
    assert run.signal("approval", approval) == "delivered"
    drive(run)
    assert run.status == status
    refunds = [c for c in run.compensations() if c.state == "succeeded"]
    assert bool(refunds) is refunded
    if refunded:
        assert "order 7 rejected: fraud" in run.error
        assert Job.objects.get(id=refunds[0].job_id).result["refunded"] is True
    else:
        assert run.result == {"order": 7, "captured": True, "approved_by": "ann"}


def test_the_payment_is_refunded_when_no_approval_comes_within_a_day() -> None:
    run = start_payment_approval(order_id=8, amount_cents=500)
    now = drive(run)
    with connection.cursor() as cursor:
        assert workflow_store.expire_signals(cursor, now=now + timedelta(hours=24, seconds=2)) == 1
    drive(run, now=now + timedelta(hours=24, seconds=3))
    assert run.status == "failed"
    assert run.error.startswith("timeout: no 'approval' signal")
    assert [c.state for c in run.compensations()] == ["succeeded"]


# --- POST /api/workflows/<id>/signals/<name> -----------------------------------------------


def signal_url(workflow_id, name: str = "approval") -> str:
    return reverse("jobs:workflow-signal", args=[workflow_id, name])


@override_settings(JOBS={"WORKFLOW_SIGNAL_TOKEN": TOKEN})
def test_the_signal_api_with_a_token() -> None:
    run = chain(wait_signal("approval"), step(t.collect)).enqueue()
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    response = client.post(signal_url(run.id), '{"approved": true}', content_type="application/json", **auth)
    assert response.status_code == 202
    assert response.json() == {"workflow": str(run.id), "signal": "approval", "outcome": "delivered"}
    drive(run)
    assert run.result == {"label": "", "values": {"approved": True}}
    # Unknown workflow, bad JSON (nothing is kept), wrong token, no credentials, GET.
    assert (
        client.post(signal_url(uuid.uuid4()), "{}", content_type="application/json", **auth).status_code
        == 404
    )
    other = chain(wait_signal("approval"), step(t.collect)).enqueue()
    bad = client.post(signal_url(other.id), "{nope", content_type="application/json", **auth)
    assert bad.status_code == 400
    assert "not JSON" in bad.json()["error"]
    assert other.refresh().status == "running"
    assert not other.nodes[1].result
    wrong = client.post(
        signal_url(other.id), "{}", content_type="application/json", HTTP_AUTHORIZATION="Bearer x"
    )
    assert wrong.status_code == 403
    assert client.post(signal_url(other.id), "{}", content_type="application/json").status_code == 401
    assert client.get(signal_url(other.id), **auth).status_code == 405


def test_the_signal_api_for_staff_sessions_needs_the_csrf_token(staff: Client) -> None:
    run = chain(wait_signal("approval"), step(t.collect)).enqueue()
    refused = staff.post(signal_url(run.id), "{}", content_type="application/json")
    assert refused.status_code == 403
    staff.get(reverse("admin:index"))
    token = staff.cookies["csrftoken"].value
    accepted = staff.post(signal_url(run.id), "[1]", content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 202
    nobody = get_user_model().objects.create_user("joe", "joe@example.com", "pw")
    plain = Client()
    plain.force_login(nobody)
    assert plain.post(signal_url(run.id), "{}", content_type="application/json").status_code == 401


# --- the console -----------------------------------------------------------------------------


def test_the_console_lists_workflows_and_draws_one(staff: Client) -> None:
    prepare_effects()
    run = chain(step(t.add, 1, 1), group(step(t.add, 1), step(t.fail)), wait_signal("never")).enqueue(
        name="demo"
    )
    drive(run)
    page = staff.get(reverse("admin:jobs_workflow_changelist"))
    assert page.status_code == 200
    assert "demo" in page.content.decode()
    detail = staff.get(reverse("admin:jobs_workflow_change", args=[run.id])).content.decode()
    assert "<svg" in detail
    for node in run.steps():
        assert reverse("admin:jobs_job_change", args=[node.job_id]) in detail
    assert "Retry fail" in detail.replace("workflows.", "")


def test_the_console_actions_send_a_signal_retry_a_step_and_cancel(staff: Client) -> None:
    prepare_effects()
    run = chain(wait_signal("go"), step(t.flaky, "k", 1).using(max_attempts=1), step(t.add, 1)).enqueue()
    staff.get(reverse("admin:index"))
    csrf = {"csrfmiddlewaretoken": staff.cookies["csrftoken"].value}
    bad = staff.post(
        reverse("admin:jobs_workflow_signal", args=[run.id]), {**csrf, "name": "go", "payload": "{x"}
    )
    assert bad.status_code == 302
    assert run.refresh().status == "running"
    staff.post(reverse("admin:jobs_workflow_signal", args=[run.id]), {**csrf, "name": "go", "payload": "5"})
    drive(run)
    assert run.status == "failed"
    dead = run.steps()[0]
    staff.post(reverse("admin:jobs_workflow_retry", args=[run.id, dead.job_id]), csrf)
    drive(run)
    assert (run.status, run.result) == ("succeeded", 6)
    other = chain(wait_signal("go"), step(t.collect)).enqueue()
    staff.post(reverse("admin:jobs_workflow_cancel", args=[other.id]), csrf)
    assert other.refresh().status == "cancelled"
    assert factories.run_due(now=clock()) == []


def test_the_console_needs_view_permission_to_look_and_change_permission_to_act() -> None:
    from django.contrib.auth.models import Permission

    run = chain(wait_signal("go"), step(t.collect)).enqueue()
    user = get_user_model().objects.create_user("viewer", "v@example.com", "pw", is_staff=True)
    client = Client()
    client.force_login(user)
    detail = reverse("admin:jobs_workflow_change", args=[run.id])
    assert client.get(detail).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_workflow"))
    page = client.get(detail)
    assert page.status_code == 200
    assert "Send signal" not in page.content.decode()
    refused = client.post(reverse("admin:jobs_workflow_cancel", args=[run.id]))
    assert refused.status_code == 403
    assert run.refresh().status == "running"
