"""The admin pages: users with their verification state and the re-send action, API
tokens shown once, delivery records; every operator action is in the admin log."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, override_settings

from accounts import services
from accounts.models import Account, ApiToken
from accounts.tokens import api_token_digest
from jobs.models import Job
from notifications.email.delivery import prepare
from tests.support.accounts import unverified_user, verified_user

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    return client


def test_users_show_and_filter_their_verification_state(admin_client) -> None:
    unverified_user(username="ann", email="ann@example.com")
    verified_user(username="bo", email="bo@example.com")
    page = admin_client.get("/admin/auth/user/?verified=no").content.decode()
    assert "ann@example.com" in page and "bo@example.com" not in page
    page = admin_client.get("/admin/auth/user/?verified=yes").content.decode()
    assert "bo@example.com" in page and "ann@example.com" not in page and "ops@example.com" in page
    assert "Email verified" in admin_client.get("/admin/auth/user/").content.decode()


def test_resend_verification_enqueues_a_job_and_is_logged(admin_client) -> None:
    ann = unverified_user(username="ann", email="ann@example.com")
    response = admin_client.post(
        "/admin/auth/user/", {"action": "resend_verification", "_selected_action": [ann.pk]}, follow=True
    )
    assert "Queued 1 verification email." in response.content.decode()
    job = Job.objects.get(task_path="accounts.tasks.send_signup_email")
    assert job.args == [ann.pk] and job.public
    assert Account.objects.get(pk=ann.pk).email_generation == 2
    entry = LogEntry.objects.get(object_id=str(ann.pk))
    assert entry.action_flag == CHANGE and str(job.id) in entry.get_change_message()
    assert entry.user.username == "ops"


def test_a_second_user_with_the_same_address_is_refused_on_the_form(admin_client) -> None:
    verified_user(username="ann", email="ann@example.com")
    bo = verified_user(username="bo", email="bo@example.com")
    page = admin_client.get(f"/admin/auth/user/{bo.pk}/change/")
    assert page.status_code == 200
    form = {
        "username": "bo", "email": "ANN@example.com", "is_active": "on", "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00", "account-TOTAL_FORMS": "1", "account-INITIAL_FORMS": "1",
        "account-MIN_NUM_FORMS": "0", "account-MAX_NUM_FORMS": "1", "account-0-user": bo.pk,
    }  # fmt: skip
    response = admin_client.post(f"/admin/auth/user/{bo.pk}/change/", form)
    assert response.status_code == 200 and "Another user has this email address." in response.content.decode()
    assert User.objects.get(pk=bo.pk).email == "bo@example.com"


def test_a_new_api_token_is_shown_once_and_stored_hashed(admin_client) -> None:
    owner = User.objects.create_user("billing", "billing@example.com")
    response = admin_client.post(
        "/admin/accounts/apitoken/add/", {"user": owner.pk, "name": "billing service"}
    )
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    page = response.content.decode()
    assert "will not be shown again" in page
    token = page.split('id="api-token" class="vTextField" readonly value="')[1].split('"')[0]
    row = ApiToken.objects.get()
    assert row.digest == api_token_digest(token) and row.user == owner
    assert token not in admin_client.get(f"/admin/accounts/apitoken/{row.pk}/change/").content.decode()
    assert token not in admin_client.get("/admin/accounts/apitoken/").content.decode()
    assert LogEntry.objects.filter(object_id=str(row.pk)).exists()
    # It works.
    status = Client().post(
        "/api/jobs/email", "{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert status.status_code == 400


def test_revoking_tokens_is_logged(admin_client) -> None:
    owner = User.objects.create_user("billing", "billing@example.com")
    row, _ = services.create_api_token(user=owner, name="old")
    response = admin_client.post(
        "/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [row.pk]}, follow=True
    )
    assert "Revoked 1 token." in response.content.decode()
    assert ApiToken.objects.get().revoked_at is not None
    assert LogEntry.objects.get(object_id=str(row.pk)).get_change_message() == "Revoked the token."


def test_delivery_records_are_listed_with_filters_and_read_only(admin_client) -> None:
    delivery = prepare(message_key="k", purpose="verify_email", template="verify_email", to="ann@example.com")
    page = admin_client.get("/admin/notifications/emaildelivery/?status__exact=pending").content.decode()
    assert "ann@example.com" in page and "verify_email" in page
    assert "By purpose" in page or "purpose" in page
    detail = admin_client.get(f"/admin/notifications/emaildelivery/{delivery.pk}/change/")
    assert detail.status_code == 200 and "Save" not in detail.content.decode()
    assert admin_client.get("/admin/notifications/emaildelivery/add/").status_code == 403


# --- who may issue a token for whom ---------------------------------------------------------

ADD_TOKEN = "/admin/accounts/apitoken/add/"


def staff_with(username: str, *codenames: str) -> tuple[object, Client]:
    user = User.objects.create(username=username, is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["add_apitoken", "view_apitoken", *codenames])
    )
    client = Client()
    client.force_login(user)
    return user, client


@override_settings(DEBUG=False)
def test_without_the_permission_a_token_is_issued_only_for_oneself() -> None:
    issuer, client = staff_with("dev")
    other = User.objects.create_user("billing", "billing@example.com")
    boss = User.objects.create_superuser("root", "root@example.com", "pw")
    for owner in (other, boss):
        response = client.post(ADD_TOKEN, {"user": owner.pk, "name": "mine now"})
        assert response.status_code == 200 and "will not be shown again" not in response.content.decode()
        assert response.context["adminform"].form.errors["user"]
    assert not ApiToken.objects.exists()
    assert client.get(ADD_TOKEN).context["adminform"].form.initial["user"] == issuer.pk
    response = client.post(ADD_TOKEN, {"user": issuer.pk, "name": "my laptop"})
    assert "will not be shown again" in response.content.decode()
    assert ApiToken.objects.get().user == issuer


@override_settings(DEBUG=False)
def test_with_the_permission_never_for_someone_with_more_privileges() -> None:
    _, client = staff_with("lead", "issue_token_for_others")
    boss = User.objects.create_superuser("root", "root@example.com", "pw")
    mighty = User.objects.create(username="mighty", is_staff=True)
    mighty.user_permissions.set(Permission.objects.filter(codename="delete_user"))
    plain = User.objects.create_user("billing", "billing@example.com")
    for owner, reason in ((boss, "superuser"), (mighty, "auth.delete_user")):
        response = client.post(ADD_TOKEN, {"user": owner.pk, "name": "escalate"})
        assert response.status_code == 200
        assert reason in " ".join(response.context["adminform"].form.errors["user"])
    assert not ApiToken.objects.exists()
    response = client.post(ADD_TOKEN, {"user": plain.pk, "name": "billing service"})
    assert "will not be shown again" in response.content.decode()
    assert ApiToken.objects.get().user == plain
