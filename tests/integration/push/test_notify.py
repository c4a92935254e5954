"""notify_user / notify_users: one delivery and one job per active device, written in the
caller's transaction with one bulk insert each; bad content refused before any write."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobs.models import Job
from jobs.states import State
from notifications.push import services
from notifications.push.exceptions import InvalidNotification, PayloadTooLarge
from notifications.push.models import DeliveryStatus, Device, PushDelivery, PushNotification
from tests.support.factories import run_due
from tests.support.push.fake_apns import Answer as APNsAnswer
from tests.support.push.fake_fcm import Answer as FCMAnswer
from tests.support.push.fixtures import device

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(django_user_model: Any) -> list[Any]:
    return [django_user_model.objects.create_user(f"user{n}", f"user{n}@example.com") for n in range(3)]


def statements_that_inserted(table: str) -> int:
    """How many statements wrote the table's rows: rows inserted by one statement share
    its transaction (xmin) and command id (cmin)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(DISTINCT (xmin::text, cmin::text)) FROM {table}")
        return int(cursor.fetchone()[0])


def test_one_delivery_and_one_job_per_active_device(users: list[Any], outbox: list[Any]) -> None:
    ana, budi, _ = users
    phone, tablet, old = device(ana, "ios"), device(ana, "android"), device(ana, "ios")
    services.devices_deactivate(device_ids=[old.id], reason="test")
    laptop = device(budi, "android")
    deliveries = services.notify_users(users=[ana, budi], title="Sale", body="Today only")
    assert {d.device_id for d in deliveries} == {phone.id, tablet.id, laptop.id}
    assert {(d.device_id, d.user_id, d.platform) for d in deliveries} == {
        (phone.id, ana.id, "ios"), (tablet.id, ana.id, "android"), (laptop.id, budi.id, "android"),
    }  # fmt: skip
    jobs = {job.id: job for job in Job.objects.filter(task_path="notifications.push.tasks.send_push")}
    assert set(jobs) == {d.job_id for d in deliveries}
    for record in deliveries:
        assert jobs[record.job_id].args == [str(record.id)]
        assert jobs[record.job_id].queue_name == "push"
    # The payload is the delivery's id only: no token and no content in the job row.
    assert all(phone.token not in str(job.args) for job in jobs.values())
    run_due(queues=("push",))
    assert sorted(m.token for m in outbox) == sorted(d.token for d in (phone, tablet, laptop))
    assert set(PushDelivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}


def test_a_fan_out_to_1000_devices_is_one_bulk_insert_of_jobs_and_one_of_deliveries(
    django_user_model: Any,
) -> None:
    people = django_user_model.objects.bulk_create(
        django_user_model(username=f"fan{n}", email=f"fan{n}@example.com") for n in range(250)
    )
    Device.objects.bulk_create(
        Device(user=person, platform="ios", token=f"{n:064x}") for n, person in enumerate(people * 4)
    )
    with transaction.atomic():
        deliveries = services.notify_users(
            users=django_user_model.objects.filter(username__startswith="fan"), title="t", body="b"
        )
    assert len(deliveries) == 1000
    assert Job.objects.count() == 1000
    assert statements_that_inserted("jobs_job") == 1
    assert statements_that_inserted("notifications_push_delivery") == 1


def test_rollback_leaves_no_notification_delivery_or_job(users: list[Any]) -> None:
    device(users[0], "ios")
    with pytest.raises(RuntimeError), transaction.atomic():
        services.notify_user(user=users[0], title="t", body="b")
        raise RuntimeError("the caller's own write failed")
    assert not PushNotification.objects.exists()
    assert not PushDelivery.objects.exists()
    assert not Job.objects.exists()


def test_expiry_is_the_job_s_not_started_deadline(users: list[Any]) -> None:
    device(users[0], "ios")
    expires = timezone.now() + timedelta(minutes=10)
    [record] = services.notify_user(user=users[0], title="Code", body="123456", expires_at=expires)
    assert Job.objects.get(id=record.job_id).expires_at == expires
    assert run_due(queues=("push",), now=expires + timedelta(seconds=1)) == []
    assert Job.objects.get(id=record.job_id).state == State.EXPIRED


def test_a_user_without_devices_gets_nothing(users: list[Any]) -> None:
    assert services.notify_user(user=users[0], title="t", body="b") == []
    assert not Job.objects.exists()
    assert not PushNotification.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"title": ""}, "title must be a non-empty string"),
        ({"body": None}, "body must be a non-empty string"),
        ({"data": {"count": 3}}, "data['count'] must be a string (FCM carries strings only)"),
        ({"data": {"aps": "x"}}, "data key 'aps' is reserved"),
        ({"data": {"google.c.a": "x"}}, "data key 'google.c.a' is reserved"),
        ({"data": ["x"]}, "data must be a dict of strings, not list"),
        ({"expires_at": "tomorrow"}, "expires_at must be an aware datetime"),
        ({"collapse_key": "k" * 65}, "collapse_key must be a string of at most 64 bytes"),
    ],
)
def test_bad_content_fails_at_notify_user_and_writes_nothing(
    users: list[Any], arguments: dict[str, Any], message: str
) -> None:
    device(users[0], "ios")
    with pytest.raises(
        InvalidNotification, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        services.notify_user(user=users[0], **{"title": "t", "body": "b", **arguments})
    assert not PushNotification.objects.exists()
    assert not Job.objects.exists()


def test_an_expiry_in_the_past_is_refused(users: list[Any]) -> None:
    with pytest.raises(InvalidNotification, match="is already past"):
        services.notify_user(
            user=users[0], title="t", body="b", expires_at=timezone.now() - timedelta(seconds=1)
        )


def test_a_payload_over_4_kb_fails_at_notify_user_with_its_size(users: list[Any]) -> None:
    device(users[0], "ios")
    with pytest.raises(
        PayloadTooLarge, match=r"the APNs payload would be 4,1\d\d bytes; APNs accepts at most 4,096"
    ):
        services.notify_user(user=users[0], title="t", body="x" * 4100)
    # Data counts too, and FCM's limit is checked as well.
    with pytest.raises(PayloadTooLarge, match="payload would be"):
        services.notify_user(user=users[0], title="t", body="b", data={"blob": "y" * 4090})
    assert not Job.objects.exists()
    # Just under the limit is fine.
    services.notify_user(user=users[0], title="t", body="x" * 3900)
    assert Job.objects.count() == 1


def test_each_outcome_deactivates_exactly_the_devices_whose_tokens_are_dead(
    live_push: Any, users: list[Any]
) -> None:
    ana = users[0]
    fine_ios, gone_ios, bad_ios, busy_ios, down_ios, big_ios = (device(ana, "ios") for _ in range(6))
    fine_fcm, gone_fcm, wrong_fcm, payload_fcm, busy_fcm = (device(ana, "android") for _ in range(5))
    stamp = int(timezone.now().timestamp() * 1000) + 1000
    live_push.apns.script(gone_ios.token, APNsAnswer(410, "Unregistered", timestamp=stamp))
    live_push.apns.script(bad_ios.token, APNsAnswer(400, "BadDeviceToken"))
    live_push.apns.script(busy_ios.token, APNsAnswer(429, "TooManyRequests", headers={"retry-after": "10"}))
    live_push.apns.script(down_ios.token, APNsAnswer(503, "ServiceUnavailable"))
    live_push.apns.script(big_ios.token, APNsAnswer(413, "PayloadTooLarge"))
    live_push.fcm.script(gone_fcm.token, FCMAnswer(404, "UNREGISTERED"))
    live_push.fcm.script(wrong_fcm.token, FCMAnswer(400, "INVALID_ARGUMENT", "bad token", "message.token"))
    live_push.fcm.script(payload_fcm.token, FCMAnswer(400, "INVALID_ARGUMENT", "Invalid JSON payload"))
    live_push.fcm.script(busy_fcm.token, FCMAnswer(429, "QUOTA_EXCEEDED"))
    services.notify_user(user=ana, title="t", body="b")
    run_due(queues=("push",))
    inactive = set(Device.objects.filter(active=False).values_list("id", flat=True))
    # BadDeviceToken is what every device answers at the other APNs environment: kept.
    assert inactive == {gone_ios.id, gone_fcm.id, wrong_fcm.id}
    by_device = dict(PushDelivery.objects.values_list("device_id", "status"))
    assert by_device == {
        fine_ios.id: "delivered", gone_ios.id: "failed", bad_ios.id: "pending", busy_ios.id: "pending",
        down_ios.id: "pending", big_ios.id: "failed", fine_fcm.id: "delivered", gone_fcm.id: "failed",
        wrong_fcm.id: "failed", payload_fcm.id: "failed", busy_fcm.id: "pending",
    }  # fmt: skip
    assert live_push.apns.violations == [] and live_push.fcm.violations == []


def test_a_device_removed_or_deactivated_before_its_job_runs_is_skipped(
    users: list[Any], outbox: list[Any]
) -> None:
    removed, deactivated = device(users[0], "ios"), device(users[0], "android")
    deliveries = services.notify_user(user=users[0], title="t", body="b")
    assert services.device_delete(user=users[0], device_id=removed.id)
    services.devices_deactivate(device_ids=[deactivated.id], reason="lost phone")
    run_due(queues=("push",))
    assert outbox == []
    reasons = sorted(
        PushDelivery.objects.filter(id__in=[d.id for d in deliveries]).values_list("status", "reason")
    )
    assert reasons == [("skipped", "device inactive: lost phone"), ("skipped", "device removed")]
