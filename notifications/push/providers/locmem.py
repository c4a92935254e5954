"""Test backend: keeps every push in ``outbox`` (like Django's locmem email backend)."""

from __future__ import annotations

from .base import Outcome, PushBackend, PushMessage, SendResult

# Every message sent by any LocmemBackend in this process, oldest first.
outbox: list[PushMessage] = []


class LocmemBackend(PushBackend):
    def send(self, message: PushMessage) -> SendResult:
        outbox.append(message)
        return SendResult(
            outcome=Outcome.DELIVERED, reason="kept in memory", provider_id=f"locmem-{len(outbox)}"
        )
