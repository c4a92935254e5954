"""The devices API over HTTP (Django's test client): registration, re-registration, shape
checks, deletion, and who may call it."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.test import Client, override_settings

from accounts.services import create_api_token
from notifications.push.models import Device
from tests.support.push.fixtures import apns_token, fcm_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def ana(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("ana", "ana@example.com")


@pytest.fixture
def budi(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("budi", "budi@example.com")


def client_for(user: Any, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def post(client: Client, body: Any, **extra: Any) -> Any:
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post("/api/devices", data=data, content_type="application/json", **extra)


def test_register_then_register_again_updates_the_same_device(ana: Any) -> None:
    client = client_for(ana)
    token = apns_token().upper()
    first = post(client, {"platform": "ios", "token": token, "app_id": "com.example.app", "locale": "id-ID"})
    assert first.status_code == 201
    body = first.json()
    assert body["token"] == token.lower()
    assert (body["platform"], body["app_id"], body["locale"], body["active"]) == (
        "ios",
        "com.example.app",
        "id-ID",
        True,
    )
    Device.objects.filter(id=body["id"]).update(active=False, deactivation_reason="APNs 410 Unregistered")
    again = post(client, {"platform": "ios", "token": token.lower(), "locale": "en"})
    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    device = Device.objects.get()
    assert device.active and device.deactivation_reason == "" and device.locale == "en"
    assert device.last_seen_at > device.created_at


def test_a_token_that_changed_hands_moves_to_the_new_user(ana: Any, budi: Any) -> None:
    token = fcm_token()
    assert post(client_for(ana), {"platform": "android", "token": token}).status_code == 201
    moved = post(client_for(budi), {"platform": "android", "token": token})
    assert moved.status_code == 200
    assert Device.objects.get().user == budi
    assert client_for(ana).get("/api/devices").json() == {"devices": []}
    assert [d["token"] for d in client_for(budi).get("/api/devices").json()["devices"]] == [token]


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"platform": "ios", "token": "abc123"}, {"token"}),
        ({"platform": "ios", "token": "g" * 64}, {"token"}),
        ({"platform": "ios", "token": "a" * 65}, {"token"}),
        ({"platform": "android", "token": "short:token"}, {"token"}),
        ({"platform": "android", "token": "x" * 150 + " spaced"}, {"token"}),
        ({"platform": "windows", "token": "a" * 64}, {"platform"}),
        ({"platform": "ios"}, {"token"}),
        ({"platform": "ios", "token": "a" * 64, "locale": "not a locale!"}, {"locale"}),
        ({"platform": "ios", "token": "a" * 64, "app_id": "has space"}, {"app_id"}),
        ({"platform": "ios", "token": "a" * 64, "user": 7}, {"user"}),
    ],
)
def test_bad_registrations_get_400_with_the_field_at_fault(
    ana: Any, body: dict[str, Any], errors: set[str]
) -> None:
    response = post(client_for(ana), body)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == errors
    assert not Device.objects.exists()


@pytest.mark.parametrize("body", ["not json", b"\xff\xfe", "[1, 2]"])
def test_a_body_that_is_not_a_json_object_gets_400(ana: Any, body: Any) -> None:
    response = post(client_for(ana), body)
    assert response.status_code == 400
    assert response.json() == {"error": "the body must be a JSON object"}


def test_an_empty_body_gets_400(ana: Any) -> None:
    # The test client sends no Content-Type with an empty body.
    response = post(client_for(ana), "")
    assert response.status_code == 400 and "Content-Type: application/json" in response.json()["error"]


def test_anonymous_requests_get_401(ana: Any) -> None:
    device = Device.objects.create(user=ana, platform="ios", token=apns_token())
    client = Client()
    for response in (
        post(client, {"platform": "ios", "token": apns_token()}),
        client.get("/api/devices"),
        client.delete(f"/api/devices/{device.id}"),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert Device.objects.count() == 1


def test_session_requests_need_the_csrf_token(ana: Any) -> None:
    client = client_for(ana, enforce_csrf_checks=True)
    refused = post(client, {"platform": "ios", "token": apns_token()})
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]
    # As a browser app would: a page sets the csrftoken cookie, the header echoes it.
    client.get("/admin/login/")
    secret = client.cookies["csrftoken"].value
    accepted = post(client, {"platform": "ios", "token": apns_token()}, HTTP_X_CSRFTOKEN=secret)
    assert accepted.status_code == 201


def test_an_api_token_registers_a_device_without_csrf_or_session(ana: Any) -> None:
    # No browser sends this header across sites: the CSRF check is for cookie sessions.
    _, secret = create_api_token(user=ana, name="phone app")
    client = Client(enforce_csrf_checks=True)
    response = post(client, {"platform": "ios", "token": apns_token()}, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 201
    assert Device.objects.get().user == ana
    assert (
        post(
            client, {"platform": "ios", "token": apns_token()}, HTTP_AUTHORIZATION="Bearer wrong"
        ).status_code
        == 401
    )


def test_delete_removes_only_one_s_own_device(ana: Any, budi: Any) -> None:
    mine = Device.objects.create(user=ana, platform="ios", token=apns_token())
    theirs = Device.objects.create(user=budi, platform="ios", token=apns_token())
    client = client_for(ana)
    assert client.delete(f"/api/devices/{theirs.id}").status_code == 404
    assert client.delete("/api/devices/999999").status_code == 404
    assert client.delete(f"/api/devices/{mine.id}").status_code == 204
    assert list(Device.objects.values_list("id", flat=True)) == [theirs.id]


def test_other_methods_get_405(ana: Any) -> None:
    response = client_for(ana).put("/api/devices", data="{}", content_type="application/json")
    assert response.status_code == 405
    assert response["Allow"] == "GET, POST"


@override_settings(DEBUG=False)
def test_a_basic_auth_header_does_not_skip_the_csrf_check(ana: Any) -> None:
    # A cross-site text/plain form, sent by a browser that holds both the session cookie
    # and HTTP basic credentials for this site: only a valid bearer token skips CSRF.
    client = client_for(ana, enforce_csrf_checks=True)
    basic = "Basic " + base64.b64encode(b"ana:secret").decode()
    body = json.dumps({"platform": "ios", "token": apns_token()})
    for content_type in ("text/plain", "application/json"):
        refused = client.post("/api/devices", data=body, content_type=content_type, HTTP_AUTHORIZATION=basic)
        assert refused.status_code == 403, content_type
    assert not Device.objects.exists()


@override_settings(DEBUG=False)
def test_registrations_must_be_json_whoever_sends_them(ana: Any) -> None:
    _, secret = create_api_token(user=ana, name="phone app")
    body = json.dumps({"platform": "ios", "token": apns_token()})
    by_token = Client(enforce_csrf_checks=True).post(
        "/api/devices", data=body, content_type="text/plain", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    by_session = client_for(ana).post("/api/devices", data=body, content_type="text/plain")
    for response in (by_token, by_session):
        assert response.status_code == 400
        assert "Content-Type: application/json" in response.json()["error"]
    assert not Device.objects.exists()
