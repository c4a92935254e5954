"""A real SMTP server on loopback for the tests (aiosmtpd), and helpers to read its mail.

``SmtpSink`` accepts every message and keeps it, or refuses recipients it is told to with
a permanent 550; ``stop()`` and ``start()`` take it down and bring it back on the same port,
so a test can make the mail server be down and come back.
"""

from __future__ import annotations

import email
import email.policy
import logging
import re
import socket
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.test import override_settings

from tests.support.workers import wait_until


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address.lower() in self.sink.refused:
            return f"550 5.1.1 <{address}>: mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        with self.sink.lock:
            self.sink.received.append(message)  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


class SmtpSink:
    def __init__(self) -> None:
        self.received: list[EmailMessage] = []
        self.refused: set[str] = set()
        self.lock = threading.Lock()
        self.port = free_port()
        self._controller: Controller | None = None

    def start(self) -> None:
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def messages(self, to: str | None = None) -> list[EmailMessage]:
        with self.lock:
            return [m for m in self.received if to is None or to.lower() in str(m["To"]).lower()]

    def wait_for(self, to: str, *, count: int = 1, timeout: float = 20.0) -> list[EmailMessage]:
        def arrived() -> list[EmailMessage] | None:
            found = self.messages(to)
            return found if len(found) >= count else None

        return wait_until(arrived, timeout=timeout, message=f"{count} email(s) to {to}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def text_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    assert part is not None, "no text/plain part"
    return part.get_content()


def html_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("html",))
    assert part is not None, "no text/html part"
    return part.get_content()


def link_in(message: EmailMessage, path_fragment: str) -> str:
    """The first link in the text part whose path contains ``path_fragment``."""
    for link in re.findall(r"https?://\S+", text_of(message)):
        if path_fragment in link:
            return link
    raise AssertionError(f"no link with {path_fragment!r} in:\n{text_of(message)}")


@pytest.fixture
def smtp_sink() -> Iterator[SmtpSink]:
    # aiosmtpd logs every connection at INFO.
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    sink = SmtpSink()
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()


@pytest.fixture
def smtp_settings(smtp_sink: SmtpSink) -> Iterator[SmtpSink]:
    """Django's SMTP backend pointed at the sink, in this process."""
    with override_settings(MAILERS={"default": smtp_mailer(smtp_sink.port)}):
        yield smtp_sink


def smtp_mailer(port: int) -> dict[str, Any]:
    return {
        "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5.0},
    }
