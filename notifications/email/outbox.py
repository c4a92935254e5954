"""The development outbox: where email goes when no mail server is configured.

Emails are sent by worker processes, so a list in memory would never reach the web process
that shows it. The outbox backend writes each message as one ``.eml`` file under
EMAIL_OUTBOX_DIR (a folder every process of the checkout shares), and prints its decoded
text part, so the links in it can be copied from the worker's output as they are (Django's
console backend prints the quoted-printable MIME body, whose links come out broken:
``?u=3DMg...=`` split across lines). The staff page /admin/outbox/ lists the messages.
"""

from __future__ import annotations

import email.policy
import os
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.mail.backends.console import EmailBackend as ConsoleBackend
from django.utils import timezone

BACKEND = "notifications.email.outbox.OutboxBackend"
# Links end at whitespace or at what text around a link usually is: quotes, brackets.
LINK = re.compile(r"https?://[^\s<>\"'()\[\]]+")


@dataclass(frozen=True)
class OutboxMessage:
    """One sent message as the outbox page shows it."""

    name: str
    sent_at: datetime
    subject: str
    sender: str
    to: str
    text: str
    links: list[str]


class OutboxBackend(ConsoleBackend):
    """Keeps each message in the outbox folder and prints its decoded text part."""

    def __init__(self, fail_silently: bool = False, **kwargs: Any) -> None:
        self.directory = Path(kwargs.pop("directory", None) or outbox_dir())
        super().__init__(fail_silently=fail_silently, **kwargs)

    def write_message(self, message: Any) -> None:
        data = message.message().as_bytes()
        self.directory.mkdir(parents=True, exist_ok=True)
        # The name sorts by time; written aside and renamed, so a reader never sees half a file.
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.eml"
        partial = self.directory / f".{name}.tmp"
        partial.write_bytes(data)
        os.replace(partial, self.directory / name)
        shown = parse(name, data)
        self.stream.write(
            f"Email to {shown.to}: {shown.subject}\n\n{shown.text.rstrip()}\n\n"
            f"(kept in the development outbox: {settings.SITE_URL}/admin/outbox/)\n{'-' * 79}\n"
        )


def outbox_dir() -> Path:
    return Path(settings.EMAIL_OUTBOX_DIR)


def in_use() -> bool:
    """Whether the default mailer is the outbox (development only; never in production)."""
    return bool(settings.MAILERS.get("default", {}).get("BACKEND") == BACKEND)


def sent_messages(*, limit: int = 50) -> list[OutboxMessage]:
    """The newest ``limit`` messages in the outbox, newest first."""
    folder = outbox_dir()
    if not folder.is_dir():
        return []
    names = sorted((entry.name for entry in folder.glob("*.eml")), reverse=True)[:limit]
    return [parse(name, (folder / name).read_bytes()) for name in names]


def parse(name: str, data: bytes) -> OutboxMessage:
    message: EmailMessage = BytesParser(policy=email.policy.default).parsebytes(data)
    body = message.get_body(preferencelist=("plain",))
    text = body.get_content() if body is not None else ""
    nanoseconds = int(name.split("-", 1)[0]) if name[:1].isdigit() else 0
    return OutboxMessage(
        name=name,
        sent_at=datetime.fromtimestamp(nanoseconds / 1e9, tz=timezone.get_current_timezone()),
        subject=str(message["Subject"] or ""),
        sender=str(message["From"] or ""),
        to=", ".join(str(value) for value in (message.get_all("To") or [])),
        text=text,
        links=list(dict.fromkeys(LINK.findall(text))),
    )
