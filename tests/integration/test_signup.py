"""Signup on the site, end to end in one process: the page, the job in the same
transaction, the email through a real SMTP server, the confirm page, login."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.models import Account
from jobs.models import Job
from jobs.states import State
from notifications.models import EmailDelivery
from tests.support.accounts import PASSWORD, run_email_jobs, signup, unverified_user, verified_user
from tests.support.mail import link_in, text_of

pytestmark = pytest.mark.django_db

User = get_user_model()


def test_signup_sends_a_link_that_verifies_the_account_and_login_works_afterwards(smtp_settings) -> None:
    client = Client()
    response = signup(client, email="Ann@Example.com", username="ann")
    assert response.status_code == 302
    assert response["Location"] == reverse("accounts:signup_done")

    user = User.objects.get(username="ann")
    assert user.email == "ann@example.com"
    assert user.account.email_verified_at is None
    job = Job.objects.get(task_path="accounts.tasks.send_signup_email")
    # Private: its timing would say whether it sent anything (no anonymous caller gets its id).
    assert not job.public and job.state == State.QUEUED and job.queue_name == "email"
    assert job.args == [user.pk] or job.kwargs == {"user_id": user.pk}

    # Not verified yet: the right password does not log in, and says why.
    refused = client.post(reverse("accounts:login"), {"username": "ann", "password": PASSWORD})
    assert refused.status_code == 200
    assert "not confirmed yet" in refused.content.decode()
    assert "_auth_user_id" not in client.session

    [outcome] = run_email_jobs()
    assert outcome["state"] == "succeeded", outcome
    [message] = smtp_settings.wait_for("ann@example.com")
    assert message["Subject"] == "Confirm your email address for jobqueue"
    assert message.get_body(preferencelist=("html",)) is not None
    link = link_in(message, "/accounts/verify/?")

    path = link.removeprefix("http://127.0.0.1:8000")
    page = client.get(path)  # what a mail scanner does: it verifies nothing
    assert page.status_code == 200
    assert "Confirm my email address" in page.content.decode()
    assert Account.objects.get(pk=user.pk).email_verified_at is None

    form = dict(parse_qsl(urlsplit(link).query))  # what the page's button posts
    assert f'name="t" value="{form["t"]}"' in page.content.decode()
    confirmed = client.post(reverse("accounts:verify"), form)
    assert confirmed.status_code == 302 and confirmed["Location"] == reverse("accounts:login")
    assert Account.objects.get(pk=user.pk).email_verified_at is not None

    logged_in = client.post(reverse("accounts:login"), {"username": "ann@example.com", "password": PASSWORD})
    assert logged_in.status_code == 302 and logged_in["Location"] == reverse("home")
    assert client.session["_auth_user_id"] == str(user.pk)
    home = client.get(reverse("home"))
    assert "Signed in as <strong>ann</strong>" in home.content.decode()


def test_the_token_is_in_no_job_row_log_line_or_table(smtp_settings, caplog) -> None:
    client = Client()
    signup(client, email="bo@example.com", username="bo")
    run_email_jobs()
    [message] = smtp_settings.wait_for("bo@example.com")
    token = dict(parse_qsl(urlsplit(link_in(message, "/accounts/verify/")).query))["t"]
    assert len(token) > 20
    # Opening the link and a bad attempt at it log requests: by path, without the token.
    Client().get(reverse("accounts:verify"), {"u": "x", "t": token})
    rows = [str(row) for row in Job.objects.values()] + [str(row) for row in EmailDelivery.objects.values()]
    assert not any(token in row for row in rows)
    assert token not in caplog.text
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT session_data FROM django_session")
        assert not any(token in data for (data,) in cursor.fetchall())


def test_a_rollback_after_the_user_is_created_leaves_no_user_and_no_job() -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        services.signup(email="cy@example.com", username="cy", password=PASSWORD, client_ip="10.0.0.1")
        assert Job.objects.filter(task_path="accounts.tasks.send_signup_email").exists()
        raise Abort
    assert not User.objects.filter(username="cy").exists()
    assert not Job.objects.exists()


def test_form_errors_are_shown_next_to_the_fields_and_nothing_is_created() -> None:
    client = Client()
    response = client.post(
        reverse("accounts:signup"),
        {"email": "not-an-address", "username": "bad name!", "password1": "123", "password2": "1234"},
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="id_email_errors"' in body and "Enter a valid email address." in body
    assert 'id="id_username_errors"' in body
    assert 'id="id_password2_errors"' in body and "didn’t match" in body
    assert not User.objects.exists() and not Job.objects.exists()


def test_the_form_checks_passwords_with_django_validators() -> None:
    response = Client().post(
        reverse("accounts:signup"),
        {"email": "dee@example.com", "username": "dee", "password1": "password", "password2": "password"},
    )
    assert "This password is too common." in response.content.decode()
    assert not User.objects.exists()


def test_a_username_taken_in_another_case_is_refused() -> None:
    verified_user(username="Eve", email="eve@example.com")
    response = signup(Client(), email="eve2@example.com", username="eve")
    assert response.status_code == 200
    assert "A user with that username already exists." in response.content.decode()


def test_the_database_refuses_a_second_user_with_the_same_address_in_another_case() -> None:
    from django.db import IntegrityError

    User.objects.create_user(username="fay", email="fay@example.com")
    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.create_user(username="fay2", email="FAY@example.com")


def test_signup_posts_need_the_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    response = signup(client, email="gus@example.com", username="gus")
    assert response.status_code == 403
    assert not User.objects.exists()


def test_an_existing_address_gets_the_same_answer_and_an_already_have_an_account_email(smtp_settings) -> None:
    verified_user(username="hal", email="hal@example.com")
    new = signup(Client(), email="new@example.com", username="newbie")
    existing = signup(Client(), email="HAL@example.com", username="someone")
    assert (new.status_code, new["Location"]) == (existing.status_code, existing["Location"])
    assert Client().get(new["Location"]).content == Client().get(existing["Location"]).content
    assert not User.objects.filter(username="someone").exists()

    jobs = list(Job.objects.filter(task_path="accounts.tasks.send_signup_email"))
    assert len(jobs) == 2 and not any(job.public for job in jobs)
    run_email_jobs()
    [notice] = smtp_settings.wait_for("hal@example.com")
    assert notice["Subject"] == "You already have a jobqueue account"
    assert "/accounts/login/" in text_of(notice) and "/accounts/password/reset/" in text_of(notice)
    [verify] = smtp_settings.wait_for("new@example.com")
    assert verify["Subject"].startswith("Confirm your email address")


def test_repeated_signups_for_one_address_within_the_cooldown_send_one_email(smtp_settings) -> None:
    verified_user(username="ida", email="ida@example.com")
    for n in range(3):
        signup(Client(), email="ida@example.com", username=f"ida{n}")
    assert Job.objects.count() == 3
    outcomes = run_email_jobs()
    assert [o["state"] for o in outcomes] == ["succeeded"] * 3
    assert len(smtp_settings.messages("ida@example.com")) == 1


def test_a_second_signup_for_an_unverified_address_resends_the_link_after_the_cooldown(
    smtp_settings, settings
) -> None:
    settings.ACCOUNTS_RESEND_COOLDOWN_ADDRESS = 0
    unverified_user(username="jo", email="jo@example.com")
    signup(Client(), email="jo@example.com", username="jo-again")
    run_email_jobs()
    [message] = smtp_settings.wait_for("jo@example.com")
    assert message["Subject"].startswith("Confirm your email address")
    assert User.objects.filter(email="jo@example.com").count() == 1


def test_expired_never_verified_signups_are_deleted_by_a_declared_schedule(settings) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Schedule
    from jobs.scheduler.declared import declared_specs, sync_declared

    specs, _ = declared_specs()
    assert specs["accounts.delete_unverified_signups"].task == "accounts.tasks.delete_unverified_signups"
    assert sync_declared() == {}  # valid: the scheduler writes them
    assert Schedule.objects.filter(name__startswith="accounts.", enabled=True).count() == 2

    old = unverified_user(username="old", email="old@example.com")
    Account.objects.filter(pk=old.pk).update(link_requested_at=timezone.now() - timedelta(days=4))
    unverified_user(username="fresh", email="fresh@example.com")
    kept = verified_user(username="kept", email="kept@example.com")
    Account.objects.filter(pk=kept.pk).update(link_requested_at=timezone.now() - timedelta(days=40))

    assert services.delete_unverified_signups() == 1
    assert set(User.objects.values_list("username", flat=True)) == {"fresh", "kept"}
    # The address is free again.
    signup(Client(), email="old@example.com", username="old-again")
    assert User.objects.filter(username="old-again", account__email_verified_at__isnull=True).exists()
