"""Apple Push Notification service: the HTTP/2 provider API with token-based auth.

``POST /3/device/<token>`` over one long-lived HTTP/2 connection, authenticated by an ES256
JWT (``kid``: the key id, ``iss``: the team id, ``iat``) signed with the team's .p8 key.
Apple wants that token reused, refreshed before it is an hour old, and not more often than
every 20 minutes (TooManyProviderTokenUpdates): ``ProviderToken`` keeps those rules. When
Apple answers ExpiredProviderToken the token is useless whatever its age (a clock apart
from Apple's, a token Apple dropped early): it is replaced at once, once per refused token,
and only Apple's TooManyProviderTokenUpdates slows the replacements down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import jwt

from .. import payloads
from ..conf import PushSettings
from ..exceptions import ProviderNotConfigured
from . import transport
from .base import Outcome, PushMessage, SendResult

# A token older than this is replaced before use (Apple refuses them after 60 minutes).
REFRESH_AFTER = 50 * 60.0
# Apple: update the token no more than once every 20 minutes.
MIN_REFRESH_INTERVAL = 20 * 60.0

# After TooManyProviderTokenUpdates no token is minted for this long, doubled at each
# consecutive refusal up to Apple's 20 minutes.
UPDATE_BACKOFF = 60.0

# Answers that mean the device token is gone: the app was removed or the token replaced.
BAD_TOKEN_REASONS = frozenset({"Unregistered", "ExpiredToken"})
# Answers that every device would give if our settings were wrong: a production token at
# the sandbox host (the default) or the reverse, or a topic of another app. The device is
# kept and the push waits for the settings to be fixed.
CONFIG_REASONS = {
    "BadDeviceToken": "a device token of the other APNs environment? check PUSH_APNS_BASE_URL",
    "DeviceTokenNotForTopic": "a device token of another app? check PUSH_APNS_TOPIC and the device's app_id",
}
# Answers about our provider token.
AUTH_REASONS = frozenset({"ExpiredProviderToken", "InvalidProviderToken", "MissingProviderToken"})


class ProviderToken:
    """The JWT APNs authenticates us by, minted from the .p8 key and cached."""

    def __init__(
        self, *, key: str, key_id: str, team_id: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.key = key
        self.key_id = key_id
        self.team_id = team_id
        self.clock = clock
        self.value = ""
        self.issued_at = 0.0

        self.held_until = 0.0
        self.update_refusals = 0
        # Sends run on several threads of one process: one mint per refused token.
        self._lock = threading.Lock()

    def current(self) -> str:
        with self._lock:
            now = self.clock()
            if not self.value or (now - self.issued_at >= REFRESH_AFTER and now >= self.held_until):
                self._mint()
            return self.value

    def wait_before_refresh(self) -> float:
        """Seconds until Apple lets us replace the current token (0: now)."""
        return max(0.0, self.issued_at + MIN_REFRESH_INTERVAL - self.clock())

    def replace(self, refused: str) -> float:
        """Apple refused ``refused``: mint its successor now, unless another send already did
        or Apple asked us to slow down. Seconds to wait before sending again (0: now)."""
        with self._lock:
            if self.value != refused:
                return 0.0
            wait = self.held_until - self.clock()
            if wait > 0:
                return wait
            self._mint()
            return 0.0

    def too_many_updates(self) -> float:
        """Apple refused a new token as one update too many: mint none for a while (seconds)."""
        with self._lock:
            wait = min(MIN_REFRESH_INTERVAL, UPDATE_BACKOFF * 2**self.update_refusals)
            self.update_refusals += 1
            self.held_until = self.clock() + wait
            return wait

    def accepted(self) -> None:
        """A send went through: the next TooManyProviderTokenUpdates starts the backoff anew."""
        self.update_refusals = 0

    def mint(self) -> str:
        with self._lock:
            return self._mint()

    def _mint(self) -> str:
        self.issued_at = self.clock()
        self.value = jwt.encode(
            {"iss": self.team_id, "iat": int(self.issued_at)},
            self.key,
            algorithm="ES256",
            headers={"kid": self.key_id},
        )
        return self.value


class APNsProvider:
    def __init__(self, *, base_url: str, topic: str, token: ProviderToken, client: httpx.Client) -> None:
        self.base_url = base_url.rstrip("/")
        self.topic = topic
        self.token = token
        self.client = client

    @classmethod
    def from_settings(cls, conf: PushSettings) -> APNsProvider:
        missing = [
            f"PUSH_{name}"
            for name in ("APNS_KEY_FILE", "APNS_KEY_ID", "APNS_TEAM_ID")
            if not getattr(conf, name)
        ]
        if missing:
            raise ProviderNotConfigured(f"APNs needs {', '.join(missing)}")
        try:
            key = Path(conf.APNS_KEY_FILE).read_text()
            # Signing once now turns a wrong key file into a clear error at start.
            token = ProviderToken(key=key, key_id=conf.APNS_KEY_ID, team_id=conf.APNS_TEAM_ID)
            token.mint()
        except (OSError, ValueError, jwt.PyJWTError) as exc:
            raise ProviderNotConfigured(
                f"PUSH_APNS_KEY_FILE {conf.APNS_KEY_FILE!r} is not a usable .p8 key: {exc}"
            ) from exc
        return cls(
            base_url=conf.APNS_BASE_URL, topic=conf.APNS_TOPIC, token=token, client=transport.client(conf)
        )

    def send(self, message: PushMessage) -> SendResult:
        topic = message.app_id or self.topic
        if not topic:
            return SendResult(outcome=Outcome.REJECTED, reason="no apns-topic: set PUSH_APNS_TOPIC")
        result, used = self._post(message, topic)
        if result.outcome is Outcome.AUTH:
            if result.reason == "ExpiredProviderToken":
                wait = self.token.replace(used)
            else:
                # A token Apple calls invalid is not cured by a new one minted at once:
                # Apple's 20 minutes apply.
                wait = self.token.wait_before_refresh() or self.token.replace(used)
            if wait > 0:
                return SendResult(
                    outcome=Outcome.RETRY,
                    http_status=result.http_status,
                    reason=f"{result.reason}; a new provider token may be made in {wait:.0f} s",
                    retry_after=wait,
                )
            result, used = self._post(message, topic)
        if result.reason == "TooManyProviderTokenUpdates":
            wait = max(self.token.too_many_updates(), result.retry_after or 0.0)
            return SendResult(
                outcome=Outcome.RETRY, http_status=result.http_status, reason=result.reason, retry_after=wait
            )
        if result.outcome is Outcome.DELIVERED:
            self.token.accepted()
        return result

    def _post(self, message: PushMessage, topic: str) -> tuple[SendResult, str]:
        """The answer, and the provider token it was sent with."""
        token = self.token.current()
        headers = {
            "authorization": f"bearer {token}",
            "apns-topic": topic,
            "apns-push-type": "alert",
            # 10: deliver at once (an alert); 5 would let the device batch it.
            "apns-priority": "10",
            "apns-id": message.id,
        }
        expiration = payloads.apns_expiration(message.expires_at)
        if expiration is not None:
            headers["apns-expiration"] = expiration
        if message.collapse_key:
            headers["apns-collapse-id"] = message.collapse_key
        body = payloads.apns_payload(title=message.title, body=message.body, data=message.data)
        url = f"{self.base_url}/3/device/{message.token}"
        return transport.post(self.client, url, content=body, headers=headers, classify=classify), token

    def close(self) -> None:
        self.client.close()


def classify(response: httpx.Response) -> SendResult:
    """What an APNs answer means for the delivery. Only Apple's word that a token is gone
    (410 Unregistered, ExpiredToken) deactivates a device; a 404 (a wrong base URL, a
    proxy's page) is our settings."""
    status = response.status_code
    if status == 200:
        provider_id = response.headers.get("apns-id", "")
        return SendResult(outcome=Outcome.DELIVERED, http_status=status, reason="", provider_id=provider_id)
    answer = transport.json_object(response)
    reason = str(answer.get("reason") or response.reason_phrase or status)
    if reason in BAD_TOKEN_REASONS:
        since = None
        if isinstance(answer.get("timestamp"), int | float):
            # Milliseconds since the epoch at which APNs learned the token was invalid.
            since = datetime.fromtimestamp(answer["timestamp"] / 1000, tz=UTC)
        return SendResult(outcome=Outcome.BAD_TOKEN, http_status=status, reason=reason, invalid_since=since)
    if reason in CONFIG_REASONS:
        return SendResult(
            outcome=Outcome.CONFIG, http_status=status, reason=f"{reason} ({CONFIG_REASONS[reason]})"
        )
    if status in (404, 410):
        return SendResult(
            outcome=Outcome.CONFIG,
            http_status=status,
            reason=f"{reason} (not an APNs answer: check PUSH_APNS_BASE_URL)",
        )
    if status == 403 or reason in AUTH_REASONS:
        return SendResult(outcome=Outcome.AUTH, http_status=status, reason=reason)
    # 429 and 5xx: later; PayloadTooLarge, BadTopic, BadCollapseId, ...: never.
    return transport.retry_or_reject(response, reason)
