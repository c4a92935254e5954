"""Every operator action in the console, across every app, needs a permission beyond viewing
and leaves an entry in Django's admin log (invariant 16). The first tests walk whatever is
registered, so an action or extra admin page added later is held to the same rule."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib import admin
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.admin.options import ActionLocation
from django.contrib.auth.models import Permission
from django.test import Client, RequestFactory
from django.urls import URLPattern, reverse
from django.urls.converters import UUIDConverter
from django.utils import timezone

from accounts import services as account_services
from accounts.models import ApiToken
from jobs.models import Job, Limit, Schedule
from jobs.models import Workflow as WorkflowRow
from jobs.workflows import chain, step, wait_signal
from notifications.push.models import Device
from tests.integration.test_scheduler_support import make_schedule
from tests.support.accounts import unverified_user
from tests.tasks import workflows as t

from .workflow_support import drive, prepare_effects

pytestmark = pytest.mark.django_db

# The pages every ModelAdmin has; the rest of its URLs are extra pages of its own.
STANDARD_PAGES = ("_changelist", "_add", "_history", "_delete", "_change", "_autocomplete")
# Arguments for extra pages whose string arguments pick what they do.
SAMPLE_ARGUMENTS: dict[str, list[dict[str, str]]] = {
    "jobs_job_operate": [{"operation": name} for name in ("replay", "cancel", "run-now")],
    "jobs_job_queue_operate": [{"queue": "default", "operation": name} for name in ("pause", "resume")],
}


def registered() -> list[tuple[type, admin.ModelAdmin]]:
    reverse("admin:index")  # the URLconf discovers the admin modules
    return list(admin.site._registry.items())


def viewer(django_user_model) -> Any:
    """A staff user who may view every model and do nothing else."""
    user = django_user_model.objects.create(username=f"viewer-{uuid.uuid4().hex[:6]}", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    return user


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator(django_user_model) -> Any:
    return django_user_model.objects.create(username="ops", is_staff=True, is_superuser=True)


def test_every_registered_admin_action_declares_its_permissions() -> None:
    missing = [
        f"{model_admin.__class__.__name__}.{action.name}"
        for _, model_admin in registered()
        for location in ActionLocation
        for action in model_admin._get_base_actions(location)
        if not getattr(action.func, "allowed_permissions", None)
    ]
    assert missing == []


def test_a_view_only_staff_user_is_offered_no_action_anywhere(django_user_model) -> None:
    request = RequestFactory().get("/admin/")
    request.user = viewer(django_user_model)
    offered = {
        model_admin.__class__.__name__: sorted(model_admin.get_actions(request, action_location=location))
        for _, model_admin in registered()
        for location in ActionLocation
        if model_admin.get_actions(request, action_location=location)
    }
    assert offered == {}


READ_ONLY_PAGES = {"jobs_job_dashboard"}


def extra_pages() -> list[tuple[str, dict[str, str]]]:
    pages = []
    for _, model_admin in registered():
        for pattern in model_admin.get_urls():
            if not isinstance(pattern, URLPattern) or not pattern.name:
                continue
            if pattern.name.endswith(STANDARD_PAGES):
                continue
            converters = pattern.pattern.converters
            for sample in SAMPLE_ARGUMENTS.get(pattern.name, [{}]):
                arguments = {
                    name: sample.get(name, str(uuid.uuid4()) if isinstance(conv, UUIDConverter) else "1")
                    for name, conv in converters.items()
                }
                pages.append((pattern.name, arguments))
    return pages


def test_every_extra_admin_page_refuses_a_view_only_staff_user(django_user_model) -> None:
    pages = extra_pages()
    # The pages this walk must find: job buttons, queue pause, workflow cancel/signal/retry.
    names = {name for name, _ in pages}
    assert {"jobs_job_operate", "jobs_job_queue_operate", "jobs_workflow_cancel", "jobs_workflow_signal",
            "jobs_workflow_retry", "jobs_job_edit_replay"} <= names  # fmt: skip
    client = client_for(viewer(django_user_model))
    answers = {
        (name, tuple(sorted(arguments.items()))): client.post(
            reverse(f"admin:{name}", kwargs=arguments), {"name": "go", "payload": "1"}
        ).status_code
        for name, arguments in pages
    }
    # A page that only shows (the dashboard) takes no POST at all; every other one refuses.
    refused = {key: 405 if key[0] in READ_ONLY_PAGES else 403 for key in answers}
    assert answers == refused
    assert not LogEntry.objects.exists()


# --- schedules --------------------------------------------------------------------------

SCHEDULES = reverse("admin:jobs_schedule_changelist")


def act(client: Client, url: str, action: str, *pks: Any) -> Any:
    return client.post(url, {"action": action, "_selected_action": [str(pk) for pk in pks]}, follow=True)


def test_a_view_only_staff_user_cannot_run_or_disable_a_schedule(django_user_model) -> None:
    schedule = make_schedule("hourly", enabled=True)
    client = client_for(viewer(django_user_model))
    assert client.get(SCHEDULES).status_code == 200
    for action in ("run_schedules_now", "disable_schedules", "enable_schedules"):
        act(client, SCHEDULES, action, schedule.pk)
    schedule.refresh_from_db()
    assert schedule.enabled and not Job.objects.exists() and not LogEntry.objects.exists()


def test_running_and_disabling_a_schedule_is_logged(operator) -> None:
    schedule = make_schedule("hourly", enabled=True)
    client = client_for(operator)
    response = act(client, SCHEDULES, "run_schedules_now", schedule.pk)
    assert "enqueued job" in response.content.decode()
    job = Job.objects.get()
    act(client, SCHEDULES, "disable_schedules", schedule.pk)
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    act(client, SCHEDULES, "enable_schedules", schedule.pk)
    entries = LogEntry.objects.filter(object_id=str(schedule.pk)).order_by("id")
    assert [e.get_change_message() for e in entries] == [
        f"Ran the schedule now: enqueued job {job.id}.",
        "Disabled the schedule.",
        "Enabled the schedule.",
    ]
    assert {(e.action_flag, e.user_id) for e in entries} == {(CHANGE, operator.pk)}


# --- API tokens, users, limits, devices -------------------------------------------------------


def test_a_view_only_staff_user_cannot_revoke_a_token(django_user_model) -> None:
    owner = django_user_model.objects.create(username="billing")
    row, _ = account_services.create_api_token(user=owner, name="billing")
    client = client_for(viewer(django_user_model))
    act(client, reverse("admin:accounts_apitoken_changelist"), "revoke", row.pk)
    assert ApiToken.objects.get().revoked_at is None and not LogEntry.objects.exists()


def test_a_view_only_staff_user_cannot_resend_verification_emails(django_user_model) -> None:
    ann = unverified_user(username="ann", email="ann@example.com")
    client = client_for(viewer(django_user_model))
    act(client, reverse("admin:auth_user_changelist"), "resend_verification", ann.pk)
    assert not Job.objects.exists() and not LogEntry.objects.exists()


def test_lifting_a_limit_needs_the_change_permission_and_is_logged(django_user_model, operator) -> None:
    Limit.objects.create(name="smtp", rate=5, burst=5)
    url = reverse("admin:jobs_limit_changelist")
    act(client_for(viewer(django_user_model)), url, "lift", "smtp")
    assert Limit.objects.get(name="smtp").rate == 5 and not LogEntry.objects.exists()
    act(client_for(operator), url, "lift", "smtp")
    assert Limit.objects.get(name="smtp").rate is None
    assert LogEntry.objects.get(object_id="smtp").get_change_message().startswith("Lifted")


def test_deactivating_and_reactivating_devices_is_logged(operator) -> None:
    device = Device.objects.create(user=operator, platform="ios", token="a" * 64)
    url = reverse("admin:notifications_device_changelist")
    act(client_for(operator), url, "deactivate", device.pk)
    act(client_for(operator), url, "reactivate", device.pk)
    messages = [
        e.get_change_message() for e in LogEntry.objects.filter(object_id=str(device.pk)).order_by("id")
    ]
    assert messages == ["Deactivated the device.", "Reactivated the device."]


# --- workflows --------------------------------------------------------------------------------


def test_workflow_cancel_signal_and_cancel_action_are_logged(operator) -> None:
    prepare_effects()
    client = client_for(operator)
    run = chain(step(t.add, 1, 2), wait_signal("approval", timeout=3600), step(t.collect, "after")).enqueue()
    drive(run)
    client.post(reverse("admin:jobs_workflow_signal", args=[run.id]), {"name": "other", "payload": "5"})
    client.post(reverse("admin:jobs_workflow_cancel", args=[run.id]))
    second = chain(step(t.add, 1, 2), wait_signal("approval", timeout=3600)).enqueue()
    act(client, reverse("admin:jobs_workflow_changelist"), "cancel_workflows", second.id)
    assert WorkflowRow.objects.get(id=second.id).status == "cancelled"
    first = [e.get_change_message() for e in LogEntry.objects.filter(object_id=str(run.id)).order_by("id")]
    assert first[0].startswith("Sent signal 'other' with payload 5:")
    assert first[1] == "Cancel: the workflow is cancelled."
    assert LogEntry.objects.get(object_id=str(second.id)).get_change_message() == (
        "Cancel: the workflow is cancelled."
    )


def test_cleaning_up_expired_login_attempts_needs_delete_and_is_logged(django_user_model, operator) -> None:
    # Logged in first: a login makes axes sweep expired attempts itself.
    viewing, operating = client_for(viewer(django_user_model)), client_for(operator)
    attempt, fresh = (
        AccessAttempt.objects.create(
            username=name, ip_address="10.0.0.1", user_agent="t", failures_since_start=1
        )
        for name in ("ann", "bo")
    )
    AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=timezone.now() - timedelta(days=1))
    url = reverse("admin:axes_accessattempt_changelist")
    act(viewing, url, "cleanup_expired_attempts", attempt.pk)
    assert AccessAttempt.objects.count() == 2 and not LogEntry.objects.exists()
    response = act(operating, url, "cleanup_expired_attempts", attempt.pk)
    assert "Cleaned up 1 expired access attempt." in response.content.decode()
    assert list(AccessAttempt.objects.all()) == [fresh]
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.user_id) == (DELETION, str(attempt.pk), operator.pk)
