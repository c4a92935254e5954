"""A local stand-in for APNs' provider API: ``POST /3/device/<token>`` over HTTP/2.

It checks what Apple checks (an ES256 JWT signed by the team's key, with ``kid`` and ``iss``,
not older than an hour; the topic; the push type; the payload's shape and size), records
every request, and answers 200 or a scripted answer per device token. Anything a real
APNs would refuse that the scripts did not ask for is also kept in ``violations``.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import jwt

from .servers import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC, lifespan, read_body, request_headers, respond

PATH = re.compile(r"/3/device/([0-9a-f]{64,200})")


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str = ""
    # Milliseconds since the epoch; APNs sends it with 410.
    timestamp: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    token: str
    headers: dict[str, str]
    payload: dict[str, Any]
    jwt_claims: dict[str, Any]
    jwt: str
    client: tuple[str, int]
    http_version: str
    status: int = 0


class FakeAPNs:
    def __init__(self, public_key: Any, *, topic: str = APNS_TOPIC) -> None:
        self.public_key = public_key
        self.topic = topic
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.requests: list[Seen] = []
            self.violations: list[str] = []
            self.scripts: dict[str, deque[Answer]] = defaultdict(deque)
            self.clock_offset = 0.0

    def script(self, token: str, *answers: Answer) -> None:
        """The next answers for ``token``, in order; 200 once they are used up."""
        with self.lock:
            self.scripts[token].extend(answers)

    def connections(self) -> set[tuple[str, int]]:
        return {seen.client for seen in self.requests}

    def delivered(self) -> list[Seen]:
        return [seen for seen in self.requests if seen.status == 200]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        body = await read_body(receive)
        headers = request_headers(scope)
        status, reason, extra = self._answer(scope, headers, body)
        response_headers = {"apns-id": headers.get("apns-id") or str(uuid.uuid4()).upper()}
        response_headers.update(extra.pop("headers", {}))
        payload = json.dumps({"reason": reason, **extra}).encode() if status != 200 else b""
        await respond(send, status, payload, response_headers)

    def _answer(
        self, scope: dict[str, Any], headers: dict[str, str], body: bytes
    ) -> tuple[int, str, dict[str, Any]]:
        match = PATH.fullmatch(scope["path"])
        if scope["method"] != "POST":
            return 405, "MethodNotAllowed", {}
        if match is None:
            return 400, "BadDeviceToken", {}
        token = match.group(1)
        seen = Seen(
            token=token,
            headers=headers,
            payload={},
            jwt_claims={},
            jwt="",
            client=tuple(scope["client"]),  # type: ignore[arg-type]
            http_version=scope["http_version"],
        )
        with self.lock:
            self.requests.append(seen)
        status, reason, extra = self._check(seen, headers, body)
        if status == 200:
            with self.lock:
                scripted = self.scripts[token].popleft() if self.scripts[token] else None
            if scripted is not None:
                status, reason = scripted.status, scripted.reason
                extra = {"timestamp": scripted.timestamp} if scripted.timestamp is not None else {}
                extra["headers"] = scripted.headers
        seen.status = status
        return status, reason, extra

    def _violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    def _check(self, seen: Seen, headers: dict[str, str], body: bytes) -> tuple[int, str, dict[str, Any]]:
        if seen.http_version != "2":
            self._violation(f"HTTP/{seen.http_version}: APNs speaks HTTP/2 only")
            return 400, "BadPath", {}
        authorization = headers.get("authorization", "")
        if not authorization.startswith("bearer "):
            self._violation("no bearer provider token")
            return 403, "MissingProviderToken", {}
        seen.jwt = authorization.removeprefix("bearer ")
        try:
            header = jwt.get_unverified_header(seen.jwt)
            claims = jwt.decode(
                seen.jwt, self.public_key, algorithms=["ES256"], options={"verify_iat": False}
            )
        except jwt.PyJWTError as exc:
            self._violation(f"provider token does not verify: {exc}")
            return 403, "InvalidProviderToken", {}
        seen.jwt_claims = claims
        if header.get("kid") != APNS_KEY_ID or claims.get("iss") != APNS_TEAM_ID:
            self._violation(f"provider token names kid={header.get('kid')} iss={claims.get('iss')}")
            return 403, "InvalidProviderToken", {}
        if time.time() + self.clock_offset - float(claims.get("iat", 0)) > 3600:
            return 403, "ExpiredProviderToken", {}
        if headers.get("apns-topic") != self.topic:
            self._violation(f"apns-topic {headers.get('apns-topic')!r}")
            return 400, "BadTopic", {}
        if headers.get("apns-push-type") != "alert" or headers.get("apns-priority") not in ("10", "5"):
            self._violation(
                f"push type {headers.get('apns-push-type')} priority {headers.get('apns-priority')}"
            )
            return 400, "InvalidPushType", {}
        if "apns-expiration" in headers and not headers["apns-expiration"].isdigit():
            self._violation(f"apns-expiration {headers['apns-expiration']!r}")
            return 400, "BadExpirationDate", {}
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return 400, "BadCollapseId", {}
        if "apns-id" in headers:
            try:
                uuid.UUID(headers["apns-id"])
            except ValueError:
                self._violation(f"apns-id {headers['apns-id']!r}")
                return 400, "BadMessageId", {}
        if len(body) > 4096:
            return 413, "PayloadTooLarge", {}
        try:
            payload = json.loads(body)
            alert = payload["aps"]["alert"]
            assert isinstance(alert["title"], str) and isinstance(alert["body"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            self._violation(f"payload shape: {body[:200]!r}")
            return 400, "PayloadEmpty", {}
        seen.payload = payload
        return 200, "", {}
