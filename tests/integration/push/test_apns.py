"""Deliveries to iOS devices through the real APNs provider, against the local fake APNs
(HTTP/2 over TLS, JWT checked with the team's public key), jobs run by run_due."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import jwt
import pytest
from django.db import connection
from django.utils import timezone

from jobs import store
from jobs.states import State
from notifications.push import services
from notifications.push.models import DeliveryStatus, Device, PushDelivery, PushNotification
from notifications.push.providers import get_backend
from notifications.push.tasks import send_push
from tests.support.push.fake_apns import Answer
from tests.support.push.fixtures import delivery, device, job, run_push
from tests.support.push.servers import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("ana", "ana@example.com")


def test_a_push_reaches_apns_with_a_signed_token_and_apple_s_headers(live_push: Any, user: Any) -> None:
    phone = device(user, "ios")
    expires = timezone.now() + timedelta(hours=2)
    [sent] = services.notify_user(
        user=user,
        title="Your code",
        body="123456",
        data={"screen": "login"},
        expires_at=expires,
        collapse_key="otp",
    )
    run_push()
    assert live_push.apns.violations == []
    [seen] = live_push.apns.requests
    assert seen.http_version == "2"
    assert seen.token == phone.token
    assert seen.payload == {
        "aps": {"alert": {"title": "Your code", "body": "123456"}, "sound": "default"},
        "screen": "login",
    }
    assert seen.headers["apns-topic"] == APNS_TOPIC
    assert seen.headers["apns-push-type"] == "alert"
    assert seen.headers["apns-priority"] == "10"
    assert seen.headers["apns-collapse-id"] == "otp"
    assert seen.headers["apns-expiration"] == str(int(expires.timestamp()))
    assert seen.headers["apns-id"] == str(sent.id)
    # The fake verified the signature with the team's public key; the claims are Apple's.
    assert jwt.get_unverified_header(seen.jwt) == {"alg": "ES256", "kid": APNS_KEY_ID, "typ": "JWT"}
    assert seen.jwt_claims["iss"] == APNS_TEAM_ID
    assert abs(seen.jwt_claims["iat"] - time.time()) < 60
    done = delivery(sent.pk)
    assert (done.status, done.http_status, done.provider_id, done.attempts) == (
        DeliveryStatus.DELIVERED, 200, str(sent.id), 1,
    )  # fmt: skip
    assert job(done).state == State.SUCCEEDED
    assert job(done).result["status"] == "delivered"


def test_the_provider_token_is_reused_across_pushes(live_push: Any, user: Any) -> None:
    for _ in range(3):
        device(user, "ios")
    services.notify_user(user=user, title="t", body="b")
    services.notify_user(user=user, title="t", body="b")
    run_push()
    assert len(live_push.apns.delivered()) == 6
    assert len({seen.jwt for seen in live_push.apns.requests}) == 1


def test_410_with_a_timestamp_deactivates_the_device_unless_it_registered_again_since(
    live_push: Any, user: Any, django_user_model: Any
) -> None:
    gone = device(user, "ios")
    back = device(user, "ios")
    # Apple learned of both tokens' end an hour ago; one was registered again since.
    hour_ago = timezone.now() - timedelta(hours=1)
    Device.objects.filter(id__in=[gone.id, back.id]).update(last_seen_at=hour_ago - timedelta(days=1))
    device(user, "ios", token=back.token)
    stamp = int((hour_ago.timestamp()) * 1000)
    live_push.apns.script(gone.token, Answer(410, "Unregistered", timestamp=stamp))
    live_push.apns.script(back.token, Answer(410, "Unregistered", timestamp=stamp))
    deliveries = {d.device_id: d for d in services.notify_user(user=user, title="t", body="b")}
    outcomes = run_push()
    assert all(outcome["state"] == "succeeded" for outcome in outcomes)
    gone.refresh_from_db()
    back.refresh_from_db()
    assert not gone.active
    assert gone.deactivation_reason == "APNs 410 Unregistered"
    assert back.active
    for record in (delivery(deliveries[gone.id].pk), delivery(deliveries[back.id].pk)):
        assert (record.status, record.http_status, record.reason) == (
            DeliveryStatus.FAILED,
            410,
            "Unregistered",
        )


def test_bad_device_token_keeps_the_device_and_names_the_setting(live_push: Any, user: Any) -> None:
    # A production token at the sandbox host (the default) or the reverse: every device of
    # the app would answer so, and none may be switched off for it.
    phone = device(user, "ios")
    live_push.apns.script(phone.token, Answer(400, "BadDeviceToken"))
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    phone.refresh_from_db()
    assert phone.active and phone.deactivation_reason == ""
    waiting = job(sent)
    assert waiting.state == State.SCHEDULED and waiting.run_at > now
    assert "BadDeviceToken" in waiting.last_error and "PUSH_APNS_BASE_URL" in waiting.last_error
    assert delivery(sent.pk).status == DeliveryStatus.PENDING
    # Once the settings are right, the retry delivers it.
    run_push(now=waiting.run_at)
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED


def test_429_is_retried_after_the_retry_after_seconds(live_push: Any, user: Any) -> None:
    phone = device(user, "ios")
    live_push.apns.script(phone.token, Answer(429, "TooManyRequests", headers={"retry-after": "120"}))
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    waiting = job(sent)
    assert waiting.state == State.SCHEDULED
    assert waiting.run_at == now + timedelta(seconds=120)
    record = delivery(sent.pk)
    assert (record.status, record.http_status, record.reason) == (
        DeliveryStatus.PENDING,
        429,
        "TooManyRequests",
    )
    # Not due a second before; due at the time Apple named.
    assert run_push(now=now + timedelta(seconds=119)) == []
    run_push(now=now + timedelta(seconds=120))
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED
    assert delivery(sent.pk).attempts == 2
    assert phone.token in {seen.token for seen in live_push.apns.delivered()}


def test_503_is_retried_with_backoff_and_the_device_kept(live_push: Any, user: Any) -> None:
    phone = device(user, "ios")
    live_push.apns.script(phone.token, Answer(503, "ServiceUnavailable"), Answer(500, "InternalServerError"))
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    first = job(sent)
    assert first.state == State.SCHEDULED and first.run_at > now
    run_push(now=first.run_at)
    second = job(sent)
    assert second.state == State.SCHEDULED and second.attempt == 2
    run_push(now=second.run_at)
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED
    phone.refresh_from_db()
    assert phone.active


def test_an_expired_provider_token_is_refreshed_once_and_the_push_resent(live_push: Any, user: Any) -> None:
    phone = device(user, "ios")
    [first] = services.notify_user(user=user, title="t", body="b")
    run_push()
    provider = get_backend().apns  # type: ignore[attr-defined]
    # 25 minutes later Apple says the token expired: it is old enough to replace at once.
    provider.token.clock = lambda: time.time() + 25 * 60
    live_push.apns.script(phone.token, Answer(403, "ExpiredProviderToken"))
    [second] = services.notify_user(user=user, title="t", body="b")
    run_push()
    assert delivery(second.pk).status == DeliveryStatus.DELIVERED
    assert job(second).attempt == 1
    tokens = [seen.jwt for seen in live_push.apns.requests]
    assert len(tokens) == 3 and tokens[0] == tokens[1] != tokens[2]
    assert delivery(first.pk).status == DeliveryStatus.DELIVERED


def test_an_expired_provider_token_is_replaced_at_once_however_young(live_push: Any, user: Any) -> None:
    phone = device(user, "ios")
    live_push.apns.script(phone.token, Answer(403, "ExpiredProviderToken"))
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    # The token was seconds old: still, the push goes out at once with a new one.
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED
    assert job(sent).attempt == 1
    tokens = [seen.jwt for seen in live_push.apns.requests]
    assert len(tokens) == 2 and tokens[0] != tokens[1]


def test_too_many_provider_token_updates_backs_off_and_mints_nothing_meanwhile(
    live_push: Any, user: Any
) -> None:
    phone = device(user, "ios")
    live_push.apns.script(
        phone.token,
        Answer(403, "ExpiredProviderToken"),
        Answer(429, "TooManyProviderTokenUpdates"),
        Answer(403, "ExpiredProviderToken"),
    )
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    run_push(now=now)
    waiting = job(sent)
    assert waiting.state == State.SCHEDULED
    assert waiting.run_at - now >= timedelta(seconds=60)
    assert delivery(sent.pk).reason == "TooManyProviderTokenUpdates"
    # The retry is refused again within the hold: no third token, the push waits once more.
    run_push(now=waiting.run_at)
    assert job(sent).state == State.SCHEDULED and job(sent).attempt == 2
    tokens = [seen.jwt for seen in live_push.apns.requests]
    assert len(tokens) == 3 and tokens[0] != tokens[1] == tokens[2]
    # Once the hold is over a new token is minted and the push delivered.
    provider = get_backend().apns  # type: ignore[attr-defined]
    provider.token.clock = lambda: time.time() + 20 * 60
    live_push.apns.script(phone.token, Answer(403, "ExpiredProviderToken"))
    run_push(now=job(sent).run_at)
    assert delivery(sent.pk).status == DeliveryStatus.DELIVERED
    assert len({seen.jwt for seen in live_push.apns.requests}) == 3


def test_a_payload_error_ends_dead_and_leaves_the_device_alone(live_push: Any, user: Any) -> None:
    phone = device(user, "ios")
    live_push.apns.script(phone.token, Answer(413, "PayloadTooLarge"))
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    dead = job(sent)
    assert dead.state == State.DEAD and dead.attempt == 1
    assert "APNs rejected the notification: 413 PayloadTooLarge" in dead.last_error
    record = delivery(sent.pk)
    assert (record.status, record.http_status, record.reason) == (
        DeliveryStatus.FAILED,
        413,
        "PayloadTooLarge",
    )
    phone.refresh_from_db()
    assert phone.active and phone.deactivation_reason == ""


def test_a_wrong_topic_ends_dead_without_touching_the_device(live_push: Any, user: Any) -> None:
    phone = device(user, "ios", app_id="com.example.other")
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    assert job(sent).state == State.DEAD
    assert delivery(sent.pk).reason == "BadTopic"
    phone.refresh_from_db()
    assert phone.active


def test_an_expired_notification_is_dropped_unsent(live_push: Any, user: Any) -> None:
    device(user, "ios")
    expires = timezone.now() + timedelta(minutes=5)
    [sent] = services.notify_user(user=user, title="Your code", body="123456", expires_at=expires)
    assert job(sent).expires_at == expires
    # The worker only gets to it after the deadline: the engine ends it expired, unsent.
    assert run_push(now=expires + timedelta(seconds=1)) == []
    assert job(sent).state == State.EXPIRED
    assert live_push.apns.requests == []
    assert delivery(sent.pk).status == DeliveryStatus.PENDING


def test_a_job_run_twice_delivers_once(live_push: Any, user: Any) -> None:
    device(user, "ios")
    [sent] = services.notify_user(user=user, title="t", body="b")
    now = timezone.now()
    # A worker claims the job and sends the push, then dies before recording the outcome.
    with connection.cursor() as cursor:
        [claimed] = store.claim(cursor, worker=uuid.uuid4(), queues=["push"], limit=1, now=now)
    assert send_push.call(str(sent.id))["status"] == "delivered"
    # The lease runs out, the reaper hands the job back, and another worker runs it.
    later = now + timedelta(seconds=claimed[7] + 1)
    with connection.cursor() as cursor:
        assert len(store.reap(cursor, backoff_base=1, backoff_cap=1, now=later)) == 1
    [again] = run_push(now=later + timedelta(seconds=5))
    assert again["state"] == "succeeded" and again["result"] == {"status": "delivered", "sent": False}
    # And a second job for the same delivery (a duplicated enqueue) sends nothing either.
    send_push.enqueue(str(sent.id))
    [duplicate] = run_push(now=later + timedelta(seconds=10))
    assert duplicate["result"] == {"status": "delivered", "sent": False}
    assert len(live_push.apns.requests) == 1
    assert delivery(sent.pk).attempts == 1


def test_a_delivery_held_by_another_run_is_not_sent_twice(live_push: Any, user: Any) -> None:
    device(user, "ios")
    [sent] = services.notify_user(user=user, title="t", body="b")
    # Another run claimed it a moment ago and its request is in flight.
    held_until = timezone.now() + timedelta(seconds=60)
    PushDelivery.objects.filter(pk=sent.pk).update(status=DeliveryStatus.SENDING, sending_until=held_until)
    [outcome] = run_push()
    assert outcome["state"] == "queued" and outcome.get("refund") == 1
    assert live_push.apns.requests == []


def test_push_connections_trust_push_ca_bundle_not_the_environment(
    live_push: Any, user: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The environment trusts the test CA, PUSH_CA_BUNDLE does not: the handshake fails.
    ca = str(live_push.credentials.ca_file)
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.setenv(name, ca)
    settings.PUSH = {**live_push.settings(), "CA_BUNDLE": ""}
    device(user, "ios")
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    record = delivery(sent.pk)
    assert record.status == DeliveryStatus.PENDING and "CERTIFICATE_VERIFY_FAILED" in record.reason
    assert job(sent).state == State.SCHEDULED
    assert live_push.apns.requests == []


def test_a_missing_key_file_is_a_clear_dead_job_and_the_delivery_is_released(
    live_push: Any, user: Any, settings: Any
) -> None:
    settings.PUSH = {**live_push.settings(), "APNS_KEY_FILE": "/nonexistent/AuthKey.p8"}
    device(user, "ios")
    [sent] = services.notify_user(user=user, title="t", body="b")
    run_push()
    dead = job(sent)
    assert dead.state == State.DEAD
    assert "PUSH_APNS_KEY_FILE '/nonexistent/AuthKey.p8' is not a usable .p8 key" in dead.last_error
    assert delivery(sent.pk).status == DeliveryStatus.PENDING
    assert str(uuid.UUID(str(sent.job_id))) == str(dead.id)


def test_a_replayed_expired_job_still_does_not_send_once_the_notification_is_stale(
    live_push: Any, user: Any
) -> None:
    device(user, "ios")
    expires = timezone.now() + timedelta(minutes=5)
    [sent] = services.notify_user(user=user, title="Your code", body="123456", expires_at=expires)
    assert run_push(now=expires + timedelta(seconds=1)) == []
    # Time has passed the deadline; an operator replays the expired job anyway.
    PushNotification.objects.filter(id=sent.notification_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    store.replay(sent.job_id)
    [outcome] = run_push(now=timezone.now() + timedelta(seconds=1))
    assert outcome["state"] == "succeeded" and outcome["result"]["status"] == "expired"
    assert delivery(sent.pk).status == DeliveryStatus.EXPIRED
    assert live_push.apns.requests == []


def test_a_job_whose_argument_is_not_a_delivery_id_ends_dead_with_the_reason(live_push: Any) -> None:
    result = send_push.enqueue("not-a-uuid")
    [outcome] = run_push()
    assert outcome["state"] == "dead"
    assert "'not-a-uuid' is not a delivery id" in outcome["error"]["message"]
    assert result.id == str(outcome["id"])
