"""A local stand-in for FCM's HTTP v1 API and Google's OAuth2 token endpoint.

``POST /token`` takes the JWT-bearer grant google-auth sends (a JWT signed RS256 with the
service account's key, ``aud`` the token endpoint), verifies it with the public key and
issues an access token. ``POST /v1/projects/<id>/messages:send`` wants a live access token
and a well-formed message, and answers 200 or a scripted answer per registration token.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import secrets
import threading
import time
import urllib.parse
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

import jwt

from .servers import FCM_CLIENT_EMAIL, FCM_PROJECT, lifespan, read_body, request_headers, respond

SEND = re.compile(r"/v1/projects/([^/]+)/messages:send")
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
TTL = re.compile(r"\d+(\.\d{1,9})?s")


@dataclass(frozen=True)
class Answer:
    status: int
    # FcmError errorCode (UNREGISTERED, INVALID_ARGUMENT, QUOTA_EXCEEDED, UNAVAILABLE...).
    code: str
    message: str = ""
    # A google.rpc.BadRequest field violation, e.g. "message.token".
    field: str = ""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}  # fmt: skip


@dataclass
class Seen:
    token: str
    message: dict[str, Any]
    bearer: str
    client: tuple[str, int]
    http_version: str
    status: int = 0


class FakeFCM:
    def __init__(self, public_key: Any, *, token_url: str, project: str = FCM_PROJECT) -> None:
        self.public_key = public_key
        # Where the key file's token_uri points (this server); the assertion's audience is
        # Google's token endpoint whatever token_uri says, as google-auth signs it.
        self.token_url = token_url
        self.project = project
        self.lock = threading.Lock()
        self.numbers = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.requests: list[Seen] = []
            self.token_requests: list[dict[str, Any]] = []
            self.violations: list[str] = []
            self.scripts: dict[str, deque[Answer]] = defaultdict(deque)
            self.access_tokens: dict[str, float] = {}
            self.token_endpoint_down = False

    def script(self, token: str, *answers: Answer) -> None:
        with self.lock:
            self.scripts[token].extend(answers)

    def revoke_access_tokens(self) -> None:
        """Every access token issued so far is refused from now on (401), as an expired one."""
        with self.lock:
            self.access_tokens.clear()

    def delivered(self) -> list[Seen]:
        return [seen for seen in self.requests if seen.status == 200]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        body = await read_body(receive)
        headers = request_headers(scope)
        if scope["path"] == "/token" and scope["method"] == "POST":
            status, answer = self._token(body)
            await respond(send, status, json.dumps(answer).encode())
            return
        status, answer, extra_headers = self._send(scope, headers, body)
        await respond(send, status, json.dumps(answer).encode(), extra_headers)

    def _violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    # --- OAuth2 ---------------------------------------------------------------------

    def _token(self, body: bytes) -> tuple[int, dict[str, Any]]:
        if self.token_endpoint_down:
            return 503, {"error": "temporarily_unavailable"}
        form = dict(urllib.parse.parse_qsl(body.decode()))
        record: dict[str, Any] = {"form": form}
        with self.lock:
            self.token_requests.append(record)
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            self._violation(f"grant_type {form.get('grant_type')!r}")
            return 400, {"error": "unsupported_grant_type"}
        try:
            claims = jwt.decode(
                form.get("assertion", ""),
                self.public_key,
                algorithms=["RS256"],
                audience=GOOGLE_TOKEN_AUDIENCE,
                options={"require": ["iat", "exp", "aud", "iss"]},
            )
        except jwt.PyJWTError as exc:
            self._violation(f"assertion does not verify: {exc}")
            return 400, {"error": "invalid_grant", "error_description": str(exc)}
        record["claims"] = claims
        if claims["iss"] != FCM_CLIENT_EMAIL or SCOPE not in str(claims.get("scope", "")).split():
            self._violation(f"assertion iss={claims['iss']} scope={claims.get('scope')}")
            return 400, {"error": "invalid_scope"}
        access = f"ya29.fake-{next(self.numbers)}-{secrets.token_urlsafe(8)}"
        with self.lock:
            self.access_tokens[access] = time.time() + 3600
        return 200, {"access_token": access, "expires_in": 3600, "token_type": "Bearer"}

    # --- messages:send ----------------------------------------------------------------

    def _error(self, answer: Answer) -> dict[str, Any]:
        details: list[dict[str, Any]] = [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": answer.code}
        ]
        if answer.field:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": answer.field, "description": answer.message}],
                }
            )
        return {
            "error": {
                "code": answer.status,
                "message": answer.message or answer.code,
                "status": STATUS_NAMES.get(answer.status, "UNKNOWN"),
                "details": details,
            }
        }

    def _send(
        self, scope: dict[str, Any], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        match = SEND.fullmatch(scope["path"])
        if match is None or scope["method"] != "POST":
            self._violation(f"{scope['method']} {scope['path']}")
            return 404, {"error": {"code": 404, "status": "NOT_FOUND"}}, {}
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        try:
            message = json.loads(body)["message"]
        except (ValueError, KeyError, TypeError):
            self._violation(f"body {body[:200]!r}")
            return 400, self._error(Answer(400, "INVALID_ARGUMENT", "no message")), {}
        seen = Seen(
            token=str(message.get("token", "")),
            message=message,
            bearer=bearer,
            client=tuple(scope["client"]),  # type: ignore[arg-type]
            http_version=scope["http_version"],
        )
        with self.lock:
            self.requests.append(seen)
            live = self.access_tokens.get(bearer, 0) > time.time()
        if not live:
            seen.status = 401
            return (
                401,
                self._error(
                    Answer(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
                ),
                {},
            )
        if match.group(1) != self.project:
            self._violation(f"project {match.group(1)}")
            seen.status = 403
            return 403, self._error(Answer(403, "PERMISSION_DENIED", "wrong project")), {}
        problem = self._shape(message)
        if problem:
            self._violation(problem)
            seen.status = 400
            return 400, self._error(Answer(400, "INVALID_ARGUMENT", problem)), {}
        with self.lock:
            scripted = self.scripts[seen.token].popleft() if self.scripts[seen.token] else None
        if scripted is not None:
            seen.status = scripted.status
            return scripted.status, self._error(scripted), scripted.headers
        seen.status = 200
        return 200, {"name": f"projects/{self.project}/messages/0:{next(self.numbers)}"}, {}

    def _shape(self, message: dict[str, Any]) -> str:
        notification = message.get("notification") or {}
        if not isinstance(notification.get("title"), str) or not isinstance(notification.get("body"), str):
            return f"notification {notification!r}"
        data = message.get("data", {})
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            return f"data must map strings to strings: {data!r}"
        size = len(json.dumps({"notification": notification, "data": data}, separators=(",", ":")).encode())
        if size > 4096:
            return f"message is {size} bytes"
        android = message.get("android", {})
        if "ttl" in android and not TTL.fullmatch(str(android["ttl"])):
            return f"android.ttl {android['ttl']!r}"
        if android.get("priority") not in (None, "normal", "high"):
            return f"android.priority {android.get('priority')!r}"
        return ""
