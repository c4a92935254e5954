"""Firebase Cloud Messaging: the HTTP v1 API with OAuth2 access tokens.

The access token comes from the service-account key through google-auth: a JWT assertion
signed with the key's private key, exchanged at the key file's ``token_uri``. google-auth
keeps it until shortly before it expires; the exchange goes over our own HTTP client, so
it trusts exactly what the sends trust.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import google.auth.exceptions
import google.auth.transport
import httpx
from django.utils import timezone
from google.oauth2 import service_account

from .. import payloads
from ..conf import PushSettings
from ..exceptions import ProviderNotConfigured
from . import transport
from .base import Outcome, PushMessage, SendResult

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"


class _Response(google.auth.transport.Response):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def data(self) -> bytes:
        return self._response.content


class HttpxRequest(google.auth.transport.Request):
    """google-auth's transport interface over our httpx client."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _Response:
        try:
            response = self.client.request(
                method, url, content=body, headers=headers, timeout=timeout or httpx.USE_CLIENT_DEFAULT
            )
        except httpx.HTTPError as exc:
            raise google.auth.exceptions.TransportError(transport.transport_failure(exc)) from exc
        return _Response(response)


class FCMProvider:
    def __init__(
        self, *, base_url: str, credentials: service_account.Credentials, client: httpx.Client
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.project_id = credentials.project_id
        self.client = client
        self.auth_request = HttpxRequest(client)

    @classmethod
    def from_settings(cls, conf: PushSettings) -> FCMProvider:
        if not conf.FCM_CREDENTIALS_FILE:
            raise ProviderNotConfigured("FCM needs PUSH_FCM_CREDENTIALS_FILE (a service-account key)")
        try:
            info = json.loads(Path(conf.FCM_CREDENTIALS_FILE).read_text())
            credentials = service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
        except (OSError, ValueError) as exc:
            raise ProviderNotConfigured(
                f"PUSH_FCM_CREDENTIALS_FILE {conf.FCM_CREDENTIALS_FILE!r} is not a service-account key: {exc}"
            ) from exc
        if not credentials.project_id:
            raise ProviderNotConfigured("the FCM service-account key names no project_id")
        return cls(base_url=conf.FCM_BASE_URL, credentials=credentials, client=transport.client(conf))

    def send(self, message: PushMessage) -> SendResult:
        result = self._post(message, refresh=False)
        if result.outcome is Outcome.AUTH:
            # An access token revoked or expired early: fetch a new one, once.
            result = self._post(message, refresh=True)
        return result

    def _access_token(self, *, refresh: bool) -> str:
        if refresh or not self.credentials.valid:
            self.credentials.refresh(self.auth_request)
        return str(self.credentials.token)

    def _post(self, message: PushMessage, *, refresh: bool) -> SendResult:
        try:
            token = self._access_token(refresh=refresh)
        except google.auth.exceptions.GoogleAuthError as exc:
            # The token endpoint is down, or refused the key (RefreshError says which).
            return SendResult(outcome=Outcome.RETRY, reason=f"access token: {exc}")
        ttl = None
        if message.expires_at is not None:
            ttl = (message.expires_at - timezone.now()).total_seconds()
        body = payloads.fcm_message(
            token=message.token,
            title=message.title,
            body=message.body,
            data=message.data,
            collapse_key=message.collapse_key,
            ttl_seconds=ttl,
            package=message.app_id,
        )
        url = f"{self.base_url}/v1/projects/{self.project_id}/messages:send"
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json; charset=UTF-8"}
        return transport.post(self.client, url, content=body, headers=headers, classify=classify)

    def close(self) -> None:
        self.client.close()


def classify(response: httpx.Response) -> SendResult:
    """What an FCM v1 answer means for the delivery.

    Only FCM's own word that the token is gone deactivates a device: its UNREGISTERED code,
    or INVALID_ARGUMENT about ``message.token``. Any other 404 (a proxy's page, a wrong base
    URL or project) and SENDER_ID_MISMATCH (a key of another Firebase project) would say
    the same about every device at once: they are our settings, and no device pays for them.
    """
    status = response.status_code
    answer = transport.json_object(response)
    if status == 200:
        return SendResult(
            outcome=Outcome.DELIVERED, http_status=status, provider_id=str(answer.get("name", ""))
        )
    error: dict[str, Any] = answer["error"] if isinstance(answer.get("error"), dict) else {}
    fcm_code = _error_code(error)
    code = fcm_code or str(error.get("status") or status)
    reason = f"{code}: {error['message']}" if error.get("message") else code
    if fcm_code == "UNREGISTERED":
        return SendResult(outcome=Outcome.BAD_TOKEN, http_status=status, reason=reason)
    if code == "INVALID_ARGUMENT" and _names_the_token(error):
        return SendResult(outcome=Outcome.BAD_TOKEN, http_status=status, reason=reason)
    if status == 404 or fcm_code == "SENDER_ID_MISMATCH":
        return SendResult(
            outcome=Outcome.CONFIG,
            http_status=status,
            reason=f"{reason} (not FCM's UNREGISTERED: check PUSH_FCM_BASE_URL and the key's project_id)",
        )
    if status in (401, 403):
        return SendResult(outcome=Outcome.AUTH, http_status=status, reason=reason)
    return transport.retry_or_reject(response, reason)


def _error_code(error: Mapping[str, Any]) -> str:
    """FCM's own code (google.firebase.fcm.v1.FcmError), more precise than the HTTP status."""
    for detail in error.get("details") or ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("FcmError"):
            return str(detail.get("errorCode", ""))
    return ""


def _names_the_token(error: Mapping[str, Any]) -> bool:
    """INVALID_ARGUMENT is about the token (not the payload) when it says so."""
    for detail in error.get("details") or ():
        for violation in (detail.get("fieldViolations") or ()) if isinstance(detail, dict) else ():
            if isinstance(violation, dict) and violation.get("field") == "message.token":
                return True
    return "registration token" in str(error.get("message", "")).lower()
