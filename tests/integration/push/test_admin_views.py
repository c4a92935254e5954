"""The push admin's own views over HTTP: who may compose, what a bad form says, and the
progress page for a notification whose jobs are in every state."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from jobs import store
from jobs.models import Job
from notifications.push import services
from notifications.push.models import PushNotification
from tests.support.factories import run_due
from tests.support.push.fixtures import device

pytestmark = pytest.mark.django_db

ADD = "/admin/notifications/pushnotification/add/"


@pytest.fixture
def viewer(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("viewer", "viewer@example.com", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_pushnotification"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_superuser("ops", "ops@example.com")
    client = Client()
    client.force_login(user)
    return client


def test_composing_needs_the_add_permission(viewer: Client) -> None:
    assert viewer.get(ADD).status_code == 403
    assert viewer.post(ADD, {"title": "t", "body": "b", "audience": "all"}).status_code == 403
    assert not PushNotification.objects.exists()


def test_bad_json_and_bad_data_are_shown_next_to_the_field(operator: Client, django_user_model: Any) -> None:
    device(django_user_model.objects.create_user("ana"), "ios")
    response = operator.post(ADD, {"title": "t", "body": "b", "data": "{not json", "audience": "all"})
    assert response.status_code == 200
    assert "Not valid JSON" in response.content.decode()
    response = operator.post(ADD, {"title": "t", "body": "b", "data": '{"aps": "x"}', "audience": "all"})
    assert "data key &#x27;aps&#x27; is reserved" in response.content.decode()
    response = operator.post(ADD, {"title": "t", "body": "x" * 5000, "audience": "all"})
    assert "APNs accepts at most 4,096" in response.content.decode()
    assert not PushNotification.objects.exists() and not Job.objects.exists()


def test_progress_counts_deliveries_by_their_own_and_their_job_s_state(
    operator: Client, viewer: Client, django_user_model: Any, outbox: list[Any]
) -> None:
    users = [django_user_model.objects.create_user(f"u{n}") for n in range(4)]
    for user in users:
        device(user, "ios")
    notification, deliveries = services.notification_send(users=users, title="t", body="b")
    assert notification is not None
    # One is sent, one cancelled by an operator, one given up (dead), one still queued.
    store.cancel(deliveries[1].job_id)
    store.discard(deliveries[2].job_id)
    held = [deliveries[3].job_id]
    Job.objects.filter(id__in=held).update(run_at="2999-01-01T00:00:00Z")
    run_due(queues=("push",))
    page = viewer.get(f"/admin/notifications/pushnotification/{notification.pk}/change/")
    assert page.status_code == 200
    counts = page.context["progress"].counts
    assert counts == {"delivered": 1, "cancelled": 1, "failed": 1, "queued": 1}
    assert page.context["progress"].finished == 3
    assert b'http-equiv="refresh"' in page.content
    assert operator.get("/admin/notifications/pushnotification/999999/change/").status_code == 404
