"""The development backends: console prints, locmem keeps; both report the push delivered."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from notifications.push.providers import locmem
from notifications.push.providers.base import Outcome, PushMessage
from notifications.push.providers.console import ConsoleBackend
from notifications.push.providers.locmem import LocmemBackend

MESSAGE = PushMessage(
    id="0b5a3c1e-0000-4000-8000-000000000001",
    platform="ios",
    token="ab" * 32,
    title="Your code",
    body="123456",
    data={"screen": "login"},
    expires_at=datetime(2030, 1, 1, tzinfo=UTC),
)


def test_console_prints_the_push_without_the_whole_token() -> None:
    stream = io.StringIO()
    result = ConsoleBackend(stream).send(MESSAGE)
    assert result.outcome is Outcome.DELIVERED and result.provider_id == "console-1"
    line = stream.getvalue()
    assert line.startswith(f"push id={MESSAGE.id} ")
    assert '"title": "Your code"' in line and '"expires_at": "2030-01-01T00:00:00+00:00"' in line
    assert MESSAGE.token not in line


def test_locmem_keeps_every_message_in_its_outbox() -> None:
    locmem.outbox.clear()
    backend = LocmemBackend()
    assert backend.send(MESSAGE).provider_id == "locmem-1"
    assert LocmemBackend().send(MESSAGE).provider_id == "locmem-2"
    assert locmem.outbox == [MESSAGE, MESSAGE]
    locmem.outbox.clear()
