"""The HTTP-provider path (django-anymail's Postmark backend) against a real HTTP server on
loopback that answers as Postmark's API does: accepted, inactive recipient, busy, down."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings

from jobs.exceptions import Discard, Retry
from notifications.email.delivery import prepare, send_once
from notifications.models import DeliveryStatus, EmailDelivery

pytestmark = pytest.mark.django_db


class FakePostmark:
    """Answers POST /email with the next queued (status, body, headers), else 200 OK."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"path": self.path, "token": self.headers["X-Postmark-Server-Token"], **body}
                )
                status, reply, headers = (
                    fake.replies.pop(0)
                    if fake.replies
                    else (200, {"To": body["To"], "MessageID": f"pm-{len(fake.requests)}", "ErrorCode": 0,
                                "Message": "OK", "SubmittedAt": "2026-01-01T00:00:00Z"}, {})
                )  # fmt: skip
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def postmark() -> Iterator[FakePostmark]:
    fake = FakePostmark()
    fake.thread.start()
    with override_settings(
        MAILERS={"default": {"BACKEND": "anymail.backends.postmark.EmailBackend"}},
        ANYMAIL={
            "POSTMARK_SERVER_TOKEN": "server-token",
            "POSTMARK_API_URL": fake.url,
            "REQUESTS_TIMEOUT": 5,
        },
    ):
        yield fake
    fake.server.shutdown()
    fake.server.server_close()


def welcome(to: str = "ann@example.com") -> EmailDelivery:
    return prepare(
        message_key=f"test:{to}", purpose="api", template="welcome", to=to, variables={"name": "Ann"}
    )


def test_an_accepted_message_records_the_providers_message_id(postmark) -> None:
    result = send_once(welcome(), job_id=None)
    assert result["provider_message_id"] == "pm-1"
    [sent] = postmark.requests
    assert sent["path"] == "/email" and sent["token"] == "server-token"
    assert sent["To"] == "ann@example.com" and sent["Subject"] == "Welcome to jobqueue, Ann"
    assert "Hello Ann," in sent["TextBody"] and "<p>Hello Ann,</p>" in sent["HtmlBody"]
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.SENT and delivery.provider_message_id == "pm-1"
    # Sent is sent: a second attempt does not call the provider.
    assert send_once(delivery, job_id=None)["already_sent"] is True
    assert len(postmark.requests) == 1


def test_an_inactive_recipient_is_a_permanent_refusal(postmark) -> None:
    postmark.replies.append((
        422,
        {"ErrorCode": 406, "Message": "You tried to send to a recipient that has been marked as inactive.\n"
         "Found inactive addresses: bounced@example.com.\nInactive recipients are ones that have "
         "generated a hard bounce or a spam complaint. "},
        {},
    ))  # fmt: skip
    with pytest.raises(Discard, match="permanently refused"):
        send_once(welcome("bounced@example.com"), job_id=None)
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and "rejected" in delivery.error


def test_a_busy_provider_is_retried_after_its_retry_after(postmark) -> None:
    postmark.replies.append(
        (429, {"ErrorCode": 429, "Message": "Rate limit exceeded"}, {"Retry-After": "42"})
    )
    with pytest.raises(Retry) as raised:
        send_once(welcome(), job_id=None)
    assert raised.value.after == 42.0
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and "429" in delivery.error
    # The next attempt goes through.
    assert send_once(delivery, job_id=None)["status"] == DeliveryStatus.SENT


def test_a_provider_error_is_raised_for_the_jobs_backoff(postmark) -> None:
    from anymail.exceptions import AnymailAPIError

    postmark.replies.append((500, {"ErrorCode": 0, "Message": "Internal Server Error"}, {}))
    with pytest.raises(AnymailAPIError):
        send_once(welcome(), job_id=None)
    assert EmailDelivery.objects.get().status == DeliveryStatus.PENDING


def test_an_unreachable_provider_is_raised_for_the_jobs_backoff(postmark) -> None:
    from anymail.exceptions import AnymailAPIError

    nowhere = {"POSTMARK_SERVER_TOKEN": "t", "POSTMARK_API_URL": "http://127.0.0.1:9/", "REQUESTS_TIMEOUT": 2}
    with override_settings(ANYMAIL=nowhere), pytest.raises(AnymailAPIError):
        send_once(welcome(), job_id=None)
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and delivery.error
