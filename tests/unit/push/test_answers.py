"""How provider answers are classified, and Retry-After parsing (no network: the answers
are httpx responses as the servers would send them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from notifications.push.providers import apns, fcm, transport
from notifications.push.providers.base import Outcome


def response(status: int, body: object = None, headers: dict[str, str] | None = None) -> httpx.Response:
    content = b"" if body is None else json.dumps(body).encode()
    return httpx.Response(status, content=content, headers=headers or {})


@pytest.mark.parametrize(
    ("status", "reason", "outcome"),
    [
        (200, None, Outcome.DELIVERED),
        (410, "Unregistered", Outcome.BAD_TOKEN),
        (410, "ExpiredToken", Outcome.BAD_TOKEN),
        # Every device would say so at the wrong host or with the wrong topic: our settings.
        (400, "BadDeviceToken", Outcome.CONFIG),
        (400, "DeviceTokenNotForTopic", Outcome.CONFIG),
        (403, "ExpiredProviderToken", Outcome.AUTH),
        (403, "InvalidProviderToken", Outcome.AUTH),
        (429, "TooManyRequests", Outcome.RETRY),
        (429, "TooManyProviderTokenUpdates", Outcome.RETRY),
        (500, "InternalServerError", Outcome.RETRY),
        (503, "ServiceUnavailable", Outcome.RETRY),
        (413, "PayloadTooLarge", Outcome.REJECTED),
        (400, "BadTopic", Outcome.REJECTED),
        (400, "TopicDisallowed", Outcome.REJECTED),
        (400, "BadCollapseId", Outcome.REJECTED),
        (405, "MethodNotAllowed", Outcome.REJECTED),
    ],
)
def test_apns_answers(status: int, reason: str | None, outcome: Outcome) -> None:
    body = None if reason is None else {"reason": reason}
    assert apns.classify(response(status, body, {"apns-id": "A"})).outcome is outcome


@pytest.mark.parametrize("status", [404, 410])
def test_an_apns_404_or_410_without_apple_s_reason_is_a_configuration_error(status: int) -> None:
    page = httpx.Response(status, content=b"<html>Not Found</html>", headers={"content-type": "text/html"})
    result = apns.classify(page)
    assert result.outcome is Outcome.CONFIG
    assert "PUSH_APNS_BASE_URL" in result.reason


def test_apns_410_carries_the_time_the_token_became_invalid() -> None:
    result = apns.classify(response(410, {"reason": "Unregistered", "timestamp": 1_700_000_000_123}))
    assert result.invalid_since == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def fcm_error(status: int, code: str, message: str = "", field: str = "") -> dict[str, object]:
    details: list[dict[str, object]] = [
        {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
    ]
    if field:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"field": field}]}
        )
    return {"error": {"code": status, "message": message, "status": "X", "details": details}}


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, {"name": "projects/p/messages/1"}, Outcome.DELIVERED),
        (404, fcm_error(404, "UNREGISTERED"), Outcome.BAD_TOKEN),
        (400, fcm_error(400, "INVALID_ARGUMENT", "x", "message.token"), Outcome.BAD_TOKEN),
        (400, fcm_error(400, "INVALID_ARGUMENT", "The registration token is not valid"),
         Outcome.BAD_TOKEN),
        (400, fcm_error(400, "INVALID_ARGUMENT", "Invalid value at 'message.data'", "message.data"),
         Outcome.REJECTED),
        # Another project's key, a wrong base URL, a proxy's page: every device would say
        # so, none is deactivated for it.
        (403, fcm_error(403, "SENDER_ID_MISMATCH"), Outcome.CONFIG),
        (404, {"error": {"code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND"}},
         Outcome.CONFIG),
        (404, "<html><title>404 Not Found</title></html>", Outcome.CONFIG),
        (401, fcm_error(401, "UNAUTHENTICATED"), Outcome.AUTH),
        (403, fcm_error(403, "PERMISSION_DENIED"), Outcome.AUTH),
        (429, fcm_error(429, "QUOTA_EXCEEDED"), Outcome.RETRY),
        (503, fcm_error(503, "UNAVAILABLE"), Outcome.RETRY),
        (500, fcm_error(500, "INTERNAL"), Outcome.RETRY),
        (502, "<html>bad gateway</html>", Outcome.RETRY),
    ],
)  # fmt: skip
def test_fcm_answers(status: int, body: object, outcome: Outcome) -> None:
    assert fcm.classify(response(status, body)).outcome is outcome


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert transport.retry_after(response(429, headers={"retry-after": "30"})) == 30
    when = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    dated = response(503, headers={"retry-after": format_datetime(when, usegmt=True)})
    assert transport.retry_after(dated, now=when.timestamp() - 90) == 90
    assert transport.retry_after(response(503)) is None
    assert transport.retry_after(response(503, headers={"retry-after": "soon"})) is None
