"""Login, logout and password reset on the site, and login throttling (django-axes) for
the site and the admin: per account and per IP, with a clear message."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.test import Client, override_settings
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.models import Account
from jobs.models import Job
from tests.support.accounts import PASSWORD, run_email_jobs, unverified_user, verified_user
from tests.support.mail import link_in

pytestmark = pytest.mark.django_db

User = get_user_model()


def login(client: Client, username: str, password: str, *, ip: str = "127.0.0.1", path: str = ""):  # type: ignore[no-untyped-def]
    return client.post(
        path or reverse("accounts:login"), {"username": username, "password": password}, REMOTE_ADDR=ip
    )


def test_login_by_username_or_address_and_logout() -> None:
    verified_user(username="ann", email="ann@example.com")
    client = Client()
    assert login(client, "ann", PASSWORD)["Location"] == reverse("home")
    logout = client.post(reverse("accounts:logout"))
    assert logout.status_code == 200 and "You are logged out" in logout.content.decode()
    assert "_auth_user_id" not in client.session
    assert login(client, "ANN@example.com", PASSWORD)["Location"] == reverse("home")


def test_a_wrong_password_and_an_unknown_name_get_the_same_message() -> None:
    verified_user(username="ann", email="ann@example.com")
    wrong = login(Client(), "ann", "nope").content.decode()
    unknown = login(Client(), "nobody", "nope").content.decode()
    message = "That username or email address and password do not match an account."
    assert message in wrong and message in unknown


def test_an_unverified_user_is_told_how_to_get_a_link_only_with_the_right_password() -> None:
    unverified_user(username="bo", email="bo@example.com")
    right = login(Client(), "bo", PASSWORD).content.decode()
    assert "not confirmed yet" in right and reverse("accounts:resend") in right
    wrong = login(Client(), "bo", "nope").content.decode()
    assert "not confirmed yet" not in wrong
    # Nor can the admin be entered with an unverified staff account.
    User.objects.filter(username="bo").update(is_staff=True)
    admin = Client().post("/admin/login/", {"username": "bo", "password": PASSWORD, "next": "/admin/"})
    assert admin.status_code == 200 and "_auth_user_id" not in admin.wsgi_request.session


def test_repeated_wrong_passwords_lock_the_account_out_from_that_ip_with_a_clear_message(settings) -> None:
    verified_user(username="cy", email="cy@example.com")
    verified_user(username="cat", email="cat@example.com")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(Client(), "cy", "wrong", ip="10.0.0.1").status_code == 200
    # By address or by username, the guesses count against one account.
    locked = login(Client(), "cy@example.com", "wrong", ip="10.0.0.1")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed logins" in page and "Try again in 15 minutes" in page
    assert reverse("accounts:password_reset") in page
    # The right password from that address does not get in during the cool-off...
    assert login(Client(), "cy", PASSWORD, ip="10.0.0.1").status_code == 429
    # ...while another account behind the same address, and cy from elsewhere, still do.
    assert login(Client(), "cat", PASSWORD, ip="10.0.0.1")["Location"] == reverse("home")
    assert login(Client(), "cy", PASSWORD, ip="10.0.2.2")["Location"] == reverse("home")


@override_settings(DEBUG=False)
def test_failures_for_a_missing_user_do_not_lock_the_admin_out_from_the_same_ip(settings) -> None:
    User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        login(Client(), "ghost", "wrong", ip="10.5.5.5", path="/admin/login/")
    assert login(Client(), "ghost", "wrong", ip="10.5.5.5", path="/admin/login/").status_code == 429
    admin = Client()
    entered = admin.post(
        "/admin/login/?next=/admin/",
        {"username": "admin", "password": PASSWORD, "next": "/admin/"},
        REMOTE_ADDR="10.5.5.5",
    )
    assert entered.status_code == 302 and entered["Location"] == "/admin/"


def test_many_usernames_from_one_ip_lock_that_ip_out(settings) -> None:
    settings.ACCOUNTS_LOGIN_IP_FAILURE_LIMIT = 12
    verified_user(username="dee", email="dee@example.com")
    # A spray: a few guesses each at many usernames, none reaching the account limit.
    for n in range(settings.ACCOUNTS_LOGIN_IP_FAILURE_LIMIT - 1):
        assert login(Client(), f"guess{n // 2}", "wrong", ip="10.9.9.9").status_code == 200
    assert login(Client(), "one-more", "wrong", ip="10.9.9.9").status_code == 429
    locked = login(Client(), "dee", PASSWORD, ip="10.9.9.9")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "too many failed logins came from it" in page and "Try again in 15 minutes" in page
    assert login(Client(), "dee", PASSWORD, ip="10.9.9.10")["Location"] == reverse("home")


def test_a_login_does_not_forgive_its_ips_failures_for_other_usernames(settings) -> None:
    settings.ACCOUNTS_LOGIN_IP_FAILURE_LIMIT = 8
    verified_user(username="dee", email="dee@example.com")
    for n in range(settings.ACCOUNTS_LOGIN_IP_FAILURE_LIMIT - 1):
        login(Client(), f"guess{n}", "wrong", ip="10.9.9.9")
    assert login(Client(), "dee", PASSWORD, ip="10.9.9.9")["Location"] == reverse("home")
    assert login(Client(), "guess-again", "wrong", ip="10.9.9.9").status_code == 429


def test_the_admin_login_is_throttled_too(settings) -> None:
    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        login(Client(), "ops", "wrong", path="/admin/login/")
    locked = login(Client(), "ops", PASSWORD, path="/admin/login/")
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    assert AccessAttempt.objects.filter(username="ops").exists()


def test_password_reset_is_sent_by_a_job_and_the_link_sets_a_new_password(smtp_settings) -> None:
    user = unverified_user(username="eve", email="eve@example.com")
    done = Client().post(
        reverse("accounts:password_reset"), {"email": "EVE@example.com"}, REMOTE_ADDR="10.0.0.1"
    )
    assert done["Location"] == reverse("accounts:password_reset_done")
    unknown = Client().post(
        reverse("accounts:password_reset"), {"email": "nobody@example.com"}, REMOTE_ADDR="10.0.0.2"
    )
    assert unknown["Location"] == done["Location"]
    # The same private task either way; the one for the unknown address sends nothing.
    jobs = Job.objects.filter(task_path="accounts.tasks.send_password_reset_email").order_by("created_at")
    assert [job.args for job in jobs] == [[user.pk], [None]] and not any(job.public for job in jobs)
    run_email_jobs()
    [message] = smtp_settings.wait_for("eve@example.com")
    assert message["Subject"] == "Reset your jobqueue password"
    path = link_in(message, "/accounts/password/reset/confirm/?").removeprefix("http://127.0.0.1:8000")

    client = Client()
    form = client.get(path, follow=True)
    assert "Choose a new password" in form.content.decode()
    # On to Django's set-password page: the token is in no URL path (what logs record).
    token = dict(parse_qsl(urlsplit(path).query))["t"]
    assert form.redirect_chain[-1][0].endswith("/set-password/") and token not in form.redirect_chain[-1][0]
    new = "another-long-passphrase-77"
    set_password = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert set_password["Location"] == reverse("accounts:password_reset_complete")
    # The reset proved the address: the account is verified and logs in with the new password.
    assert Account.objects.get(pk=user.pk).email_verified_at is not None
    assert login(Client(), "eve", new)["Location"] == reverse("home")
    # The link worked once.
    assert "This link does not work" in Client().get(path, follow=True).content.decode()


def test_reset_emails_for_one_address_are_spaced_by_the_cooldown() -> None:
    verified_user(username="fay", email="fay@example.com")
    for n in range(3):
        Client().post(
            reverse("accounts:password_reset"), {"email": "fay@example.com"}, REMOTE_ADDR=f"10.0.0.{n}"
        )
    assert Job.objects.filter(task_path="accounts.tasks.send_password_reset_email").count() == 1


def test_a_reset_link_without_a_good_token_does_not_work() -> None:
    fay = verified_user(username="fay", email="fay@example.com")
    uid = urlsafe_base64_encode(force_bytes(fay.pk))
    for query in ("", f"?u={uid}", f"?u={uid}&t=1-2", "?u=!!&t=x"):
        page = Client().get(f"/accounts/password/reset/confirm/{query}", follow=True)
        assert "This link does not work" in page.content.decode()


def test_a_reset_link_for_another_user_does_not_work() -> None:
    fay = verified_user(username="fay", email="fay@example.com")
    gus = verified_user(username="gus", email="gus@example.com")
    uid = urlsafe_base64_encode(force_bytes(fay.pk))
    token = default_token_generator.make_token(gus)
    page = Client().get(f"/accounts/password/reset/{uid}/{token}/", follow=True)
    assert "This link does not work" in page.content.decode()
