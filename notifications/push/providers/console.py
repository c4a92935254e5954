"""Development backend: prints each push instead of sending it, and reports it delivered."""

from __future__ import annotations

import json
import sys
from itertools import count
from typing import TextIO

from .base import Outcome, PushBackend, PushMessage, SendResult


class ConsoleBackend(PushBackend):
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self._numbers = count(1)

    def send(self, message: PushMessage) -> SendResult:
        stream = self.stream or sys.stdout
        shown = {
            "platform": message.platform,
            "token": f"{message.token[:8]}…",
            "title": message.title,
            "body": message.body,
            "data": dict(message.data),
            "collapse_key": message.collapse_key or None,
            "expires_at": message.expires_at.isoformat() if message.expires_at else None,
        }
        stream.write(f"push id={message.id} {json.dumps(shown, ensure_ascii=False)}\n")
        stream.flush()
        return SendResult(
            outcome=Outcome.DELIVERED, reason="printed", provider_id=f"console-{next(self._numbers)}"
        )
