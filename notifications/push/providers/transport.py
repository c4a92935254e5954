"""The HTTP/2 client both providers use, and Retry-After parsing.

Trust is built explicitly: the public roots (certifi) plus ``PUSH_CA_BUNDLE``. Nothing
comes from the environment (``trust_env=False``): SSL_CERT_FILE, REQUESTS_CA_BUNDLE and
proxy variables set for other tools must not decide whom a push connection trusts.
"""

from __future__ import annotations

import email.utils
import ssl
import time
from pathlib import Path

import certifi
import httpx

from ..conf import PushSettings
from ..exceptions import ProviderNotConfigured


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
