"""The HTTP/2 client both providers use, and Retry-After parsing.

Trust is built explicitly: the public roots (certifi) plus ``PUSH_CA_BUNDLE``. Nothing
comes from the environment (``trust_env=False``): SSL_CERT_FILE, REQUESTS_CA_BUNDLE and
proxy variables set for other tools must not decide whom a push connection trusts.
"""

from __future__ import annotations

import email.utils
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import certifi
import httpx

from ..conf import PushSettings
from ..exceptions import ProviderNotConfigured
from .base import Outcome, SendResult


def ssl_context(ca_bundle: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certifi.where())
    if ca_bundle:
        if not Path(ca_bundle).is_file():
            raise ProviderNotConfigured(f"PUSH_CA_BUNDLE {ca_bundle!r} is not a file")
        context.load_verify_locations(cafile=ca_bundle)
    # APNs speaks HTTP/2 only; ALPN must offer it (httpx does, this makes it explicit).
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def client(conf: PushSettings) -> httpx.Client:
    """One long-lived client per process and provider: HTTP/2 multiplexes every request
    over a single connection per host, reopened by httpx if the provider closes it."""
    return httpx.Client(
        http2=True,
        verify=ssl_context(conf.CA_BUNDLE),
        trust_env=False,
        timeout=httpx.Timeout(conf.REQUEST_TIMEOUT, connect=conf.CONNECT_TIMEOUT),
        follow_redirects=False,
    )


def retry_after(response: httpx.Response, *, now: float | None = None) -> float | None:
    """Seconds the provider asks us to wait (Retry-After: delta-seconds or an HTTP date)."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def transport_failure(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def post(
    client: httpx.Client,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    classify: Callable[[httpx.Response], SendResult],
) -> SendResult:
    """Send one request; the provider's answer as ``classify`` reads it, or a RETRY when
    no answer came back (refused, reset, timed out)."""
    try:
        response = client.post(url, content=content, headers=dict(headers))
    except httpx.HTTPError as exc:
        return SendResult(outcome=Outcome.RETRY, reason=transport_failure(exc))
    return classify(response)


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object, or {} for an empty or non-JSON body (a proxy's error page)."""
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def retry_or_reject(response: httpx.Response, reason: str) -> SendResult:
    """The answers left once a provider's own codes are read: throttled (429) or failing
    (5xx) means later, as Retry-After says; any other refusal is about the request."""
    status = response.status_code
    if status == 429 or status >= 500:
        return SendResult(
            outcome=Outcome.RETRY, http_status=status, reason=reason, retry_after=retry_after(response)
        )
    return SendResult(outcome=Outcome.REJECTED, http_status=status, reason=reason)
