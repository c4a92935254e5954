"""Exactly one send per message, against a real SMTP server on loopback: a server that is
down and comes back, jobs that run twice, permanent refusals, a crashed sender's claim."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import services
from jobs import store
from jobs.models import Job
from jobs.states import State
from notifications.email.delivery import claim, prepare, send_once
from notifications.models import DeliveryStatus, EmailDelivery
from tests.support import factories
from tests.support.accounts import run_email_jobs, unverified_user

pytestmark = pytest.mark.django_db


def test_smtp_down_then_up_is_retried_with_backoff_and_sent_once(smtp_settings) -> None:
    user = unverified_user(username="ann", email="ann@example.com")
    job_id = services.resend_verification(user=user)
    smtp_settings.stop()

    [first] = run_email_jobs()
    assert first["state"] == "queued"  # a retry, with the task's backoff
    job = Job.objects.get(id=job_id)
    assert job.attempt == 1 and job.run_at > timezone.now() + timedelta(seconds=20)
    assert "Connection refused" in job.last_error and job.errors[0]["exception"].endswith(
        "ConnectionRefusedError"
    )
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert "ConnectionRefused" in delivery.error

    # Not due yet at the real clock; due once the clock moves past the backoff.
    assert run_email_jobs() == []
    smtp_settings.start()
    [second] = run_email_jobs(now=job.run_at + timedelta(seconds=1))
    assert second["state"] == "succeeded", second
    assert len(smtp_settings.wait_for("ann@example.com")) == 1
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SENT and delivery.attempts == 2 and delivery.error == ""
    assert delivery.provider_message_id.startswith("<") and delivery.sent_at is not None
    assert second["result"]["provider_message_id"] == delivery.provider_message_id
    assert smtp_settings.messages()[0]["Message-ID"] == delivery.provider_message_id


def test_two_jobs_for_one_message_send_it_once(smtp_settings, settings) -> None:
    settings.ACCOUNTS_RESEND_COOLDOWN_ADDRESS = 0
    user = unverified_user(username="bo", email="bo@example.com")
    # Two jobs for the same generation: a duplicate enqueue, as a retried request makes.
    from accounts.tasks import send_signup_email

    send_signup_email.using(public=True).enqueue(user.pk)
    send_signup_email.using(public=True).enqueue(user.pk)
    outcomes = run_email_jobs()
    assert [o["state"] for o in outcomes] == ["succeeded", "succeeded"]
    assert sorted(bool(o["result"].get("already_sent")) for o in outcomes) == [False, True]
    assert len(smtp_settings.wait_for("bo@example.com")) == 1
    assert EmailDelivery.objects.get().attempts == 1


def test_a_replayed_job_whose_email_was_sent_does_not_send_again(smtp_settings) -> None:
    user = unverified_user(username="cy", email="cy@example.com")
    job_id = services.resend_verification(user=user)
    run_email_jobs()
    assert len(smtp_settings.wait_for("cy@example.com")) == 1
    # The job died after the send (as if its outcome had been lost); an operator replays it.
    Job.objects.filter(id=job_id).update(state=State.DEAD, finished_at=timezone.now())
    store.replay(job_id)
    # (Replay stamps run_at with the statement's clock, later than this test transaction's.)
    [again] = run_email_jobs(now=timezone.now() + timedelta(seconds=1))
    assert again["state"] == "succeeded" and again["result"]["already_sent"] is True
    assert len(smtp_settings.messages("cy@example.com")) == 1


def test_a_permanent_refusal_ends_the_job_dead_with_the_reason(smtp_settings) -> None:
    smtp_settings.refused.add("gone@example.com")
    user = unverified_user(username="dee", email="gone@example.com")
    job_id = services.resend_verification(user=user)
    [outcome] = run_email_jobs()
    assert outcome["state"] == "dead"
    job = Job.objects.get(id=job_id)
    assert job.state == State.DEAD and job.attempt == 1
    assert "email permanently refused" in job.last_error and "550" in job.last_error
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and "550" in delivery.error
    assert smtp_settings.messages() == []
    # A later job for the same message does not try again either.
    store.replay(job_id)
    [again] = run_email_jobs(now=timezone.now() + timedelta(seconds=1))
    assert again["state"] == "dead"
    assert EmailDelivery.objects.get().attempts == 1


def test_a_claim_held_by_a_live_sender_is_left_alone_and_a_lapsed_one_is_sent(smtp_settings) -> None:
    delivery = prepare(
        message_key="test:1",
        purpose="api",
        template="welcome",
        to="eve@example.com",
        variables={"name": "Eve"},
    )
    assert claim(delivery, job_id=None) == 1  # another attempt holds it and is sending now
    from jobs.exceptions import Snooze

    with pytest.raises(Snooze):
        send_once(delivery, job_id=None)
    assert smtp_settings.messages() == []

    # That sender died without marking the record: once its claim lapses, the message is sent
    # again. This is the documented window: a crash after the provider accepted it.
    EmailDelivery.objects.filter(pk=delivery.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    result = send_once(delivery, job_id=None)
    assert result["status"] == DeliveryStatus.SENT
    assert len(smtp_settings.wait_for("eve@example.com")) == 1
    assert EmailDelivery.objects.get().attempts == 2


def test_an_email_rendered_from_templates_has_a_text_and_an_html_part(smtp_settings) -> None:
    delivery = prepare(
        message_key="test:2", purpose="api", template="order_receipt", to="fay@example.com",
        variables={"name": "Fay <b>", "order_number": "A-17", "total": "€12.50"},
    )  # fmt: skip
    send_once(delivery, job_id=None)
    [message] = smtp_settings.wait_for("fay@example.com")
    from tests.support.mail import html_of, text_of

    assert message["Subject"] == "Your receipt for order A-17"
    assert message["From"] == "jobqueue <no-reply@localhost>"
    assert "Hello Fay <b>," in text_of(message)
    assert "Hello Fay &lt;b&gt;," in html_of(message) and "€12.50" in html_of(message)


def test_a_delivery_that_cannot_be_rendered_is_retried_and_keeps_the_error(smtp_settings) -> None:
    delivery = prepare(message_key="test:3", purpose="api", template="welcome", to="gus@example.com")
    from notifications.exceptions import BadVariables

    with pytest.raises(BadVariables):
        send_once(delivery, job_id=None)
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING and "name: required" in delivery.error


def test_the_job_of_a_deleted_user_sends_nothing(smtp_settings) -> None:
    user = unverified_user(username="hal", email="hal@example.com")
    services.resend_verification(user=user)
    user.delete()
    [outcome] = run_email_jobs()
    assert outcome["state"] == "succeeded" and outcome["result"] == {"status": "no account"}
    assert smtp_settings.messages() == []
    assert factories  # the in-process runner used above
