"""Deliveries to Android devices through the real FCM provider, against the local fake FCM
and its OAuth2 token endpoint (the service-account assertion checked with the public key)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.states import State
from notifications.push import services
from notifications.push.models import DeliveryStatus
from tests.support.push.fake_fcm import GOOGLE_TOKEN_AUDIENCE, Answer
from tests.support.push.fixtures import delivery, device, job, run_push
from tests.support.push.servers import FCM_CLIENT_EMAIL, FCM_PROJECT

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("budi", "budi@example.com")


def test_a_push_reaches_fcm_with_an_oauth_token_from_the_key_s_token_uri(live_push: Any, user: Any) -> None:
    phone = device(user, "android", app_id="com.example.app")
    expires = timezone.now() + timedelta(hours=1)
    [sent] = services.notify_user(
        user=user,
        title="Hello",
        body="World",
        data={"order": "42"},
        expires_at=expires,
        collapse_key="orders",
    )
    run_push()
    fcm = live_push.fcm
    assert fcm.violations == []
    [grant] = fcm.token_requests
    assert grant["claims"]["iss"] == FCM_CLIENT_EMAIL
    # Sent to the key file's token_uri (this fake), signed for Google's token audience.
    assert grant["claims"]["aud"] == GOOGLE_TOKEN_AUDIENCE
    [seen] = fcm.requests
    assert seen.http_version == "2"
    assert seen.bearer in fcm.access_tokens
    message = seen.message
    assert message["token"] == phone.token
    assert message["notification"] == {"title": "Hello", "body": "World"}
    assert message["data"] == {"order": "42"}
    assert message["android"]["collapse_key"] == "orders"
    assert message["android"]["restricted_package_name"] == "com.example.app"
    assert message["android"]["priority"] == "high"
    ttl = int(message["android"]["ttl"].removesuffix("s"))
    assert 3500 < ttl <= 3600
    record = delivery(sent.pk)
    assert record.status == DeliveryStatus.DELIVERED
    assert record.provider_id.startswith(f"projects/{FCM_PROJECT}/messages/")
    assert job(record).state == State.SUCCEEDED


def test_the_access_token_is_cached_for_later_pushes(live_push: Any, user: Any) -> None:
    for _ in range(3):
        device(user, "android")
    services.notify_user(user=user, title="t", body="b")
    run_push()
    services.notify_user(user=user, title="t", body="b")
    run_push()
    assert len(live_push.fcm.delivered()) == 6
    assert len(live_push.fcm.token_requests) == 1


def test_an_expired_access_token_is_refreshed_once_and_the_push_resent(live_push: Any, user: Any) -> None:
    device(user, "android")
    services.notify_user(user=user, title="t", body="b")
    run_push()
    live_push.fcm.revoke_access_tokens()
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED
    assert job(delivery(sent.pk)).attempt == 1
    assert [seen.status for seen in live_push.fcm.requests] == [200, 401, 200]
    assert len(live_push.fcm.token_requests) == 2


def test_unregistered_deactivates_the_device(live_push: Any, user: Any) -> None:
    phone = device(user, "android")
    live_push.fcm.script(phone.token, Answer(404, "UNREGISTERED", "Requested entity was not found."))
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    phone.refresh_from_db()
    assert not phone.active
    assert phone.deactivation_reason == "FCM 404 UNREGISTERED: Requested entity was not found."
    assert delivery(sent.pk).status == DeliveryStatus.FAILED
    assert job(delivery(sent.pk)).state == State.SUCCEEDED


def test_invalid_argument_naming_the_token_deactivates_the_device(live_push: Any, user: Any) -> None:
    phone = device(user, "android")
    live_push.fcm.script(
        phone.token,
        Answer(
            400,
            "INVALID_ARGUMENT",
            "The registration token is not a valid FCM registration token",
            "message.token",
        ),
    )
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    phone.refresh_from_db()
    assert not phone.active
    assert delivery(sent.pk).http_status == 400


def test_invalid_argument_about_the_payload_ends_dead_and_keeps_the_device(live_push: Any, user: Any) -> None:
    phone = device(user, "android")
    live_push.fcm.script(
        phone.token, Answer(400, "INVALID_ARGUMENT", "Invalid value at 'message.android.ttl'")
    )
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    phone.refresh_from_db()
    assert phone.active
    record = delivery(sent.pk)
    assert record.status == DeliveryStatus.FAILED
    assert job(record).state == State.DEAD
    assert "FCM rejected the notification: 400 INVALID_ARGUMENT" in job(record).last_error


def test_quota_exceeded_is_retried_after_retry_after(live_push: Any, user: Any) -> None:
    phone = device(user, "android")
    live_push.fcm.script(phone.token, Answer(429, "QUOTA_EXCEEDED", headers={"retry-after": "45"}))
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    assert job(sent).run_at == now + timedelta(seconds=45)
    assert delivery(sent.pk).reason.startswith("QUOTA_EXCEEDED")
    run_push(now=now + timedelta(seconds=45))
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED


def test_unavailable_is_retried_with_backoff(live_push: Any, user: Any) -> None:
    phone = device(user, "android")
    live_push.fcm.script(phone.token, Answer(503, "UNAVAILABLE"))
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    waiting = job(sent)
    assert waiting.state == State.SCHEDULED and waiting.run_at > now
    run_push(now=waiting.run_at)
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED


def test_a_token_endpoint_that_is_down_is_retried(live_push: Any, user: Any) -> None:
    device(user, "android")
    live_push.fcm.token_endpoint_down = True
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    assert job(sent).state == State.SCHEDULED
    assert delivery(sent.pk).reason.startswith("access token:")
    assert live_push.fcm.requests == []
    live_push.fcm.token_endpoint_down = False
    run_push(now=job(sent).run_at)
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED


def test_a_404_that_is_not_unregistered_keeps_every_device(live_push: Any, user: Any, settings: Any) -> None:
    # A wrong base URL (or a proxy's page) answers 404 for every device alike.
    settings.PUSH = {**live_push.settings(), "FCM_BASE_URL": f"{live_push.fcm_url}/wrong-prefix"}
    phones = [device(user, "android") for _ in range(2)]
    sent = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    for phone in phones:
        phone.refresh_from_db()
        assert phone.active and phone.deactivation_reason == ""
    for record in sent:
        waiting = job(record)
        assert waiting.state == State.SCHEDULED and waiting.run_at > now
        assert "404" in waiting.last_error and "PUSH_FCM_BASE_URL" in waiting.last_error
        assert delivery(record.pk).status == DeliveryStatus.PENDING


def test_sender_id_mismatch_keeps_the_device(live_push: Any, user: Any) -> None:
    # A service-account key of another Firebase project: every device would answer so.
    phone = device(user, "android")
    live_push.fcm.script(phone.token, Answer(403, "SENDER_ID_MISMATCH", "SenderId mismatch"))
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    phone.refresh_from_db()
    assert phone.active
    assert job(sent).state == State.SCHEDULED
    assert delivery(sent.pk).status == DeliveryStatus.PENDING
