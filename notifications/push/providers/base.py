"""The interface every push backend implements, and what it hands back.

A backend turns one message into one provider request and classifies the answer; the
delivery code (``sending.py``) decides what each class of answer does to the delivery, the
device and the job. Backends never raise for a provider's answer or a network failure:
they return it, so that the delivery record can say what happened.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class PushMessage:
    """One notification for one device, as built from its delivery record."""

    # The delivery's id; sent as apns-id.
    id: str
    platform: str
    token: str
    # Bundle id (apns-topic) or Android package; empty: the configured default.
    app_id: str = ""
    title: str
    body: str
    data: Mapping[str, str] = field(default_factory=dict)
    collapse_key: str = ""
    expires_at: datetime | None = None


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    # The provider says the token is no good (uninstalled app, malformed, another app's):
    # the device is deactivated; retrying cannot help.
    BAD_TOKEN = "bad_token"  # noqa: S105 - a device token's verdict, not a secret
    # Throttled, the provider is down, or the network failed: try again later.
    RETRY = "retry"
    # Our credentials were refused, even after refreshing them once.
    AUTH = "auth"
    # The request itself was refused (payload too large, bad topic...): the device is fine.
    REJECTED = "rejected"
    # The answer points at our settings (a wrong base URL, a proxy's error page, the other
    # APNs environment, another Firebase project), not at the device: the device is kept
    # and the push waits for the job's next attempt, so fixing the settings lets it through.
    CONFIG = "config"


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    outcome: Outcome
    # None when no HTTP answer came back (connection refused, timeout).
    http_status: int | None = None
    reason: str = ""
    # APNs apns-id or FCM message name, on success.
    provider_id: str = ""
    # Seconds from the provider's Retry-After (or our own wait), for RETRY.
    retry_after: float | None = None
    # For BAD_TOKEN: since when the provider knows the token as invalid (APNs 410's
    # timestamp); a device registered again after it stays active.
    invalid_since: datetime | None = None


class PushBackend:
    """Sends messages; one instance per process, reused for every job it runs."""

    def send(self, message: PushMessage) -> SendResult:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections (the process is exiting or the settings changed)."""
