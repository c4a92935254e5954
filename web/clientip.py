"""The client's IP address, for cooldowns and login throttling (django-axes uses this too)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, or with CLIENT_IP_PROXY_COUNT trusted proxies in front, the address the
    outermost of them saw (X-Forwarded-For entries left of theirs are the client's to forge)."""
    remote = request.META.get("REMOTE_ADDR", "") or ""
    proxies = settings.CLIENT_IP_PROXY_COUNT
    if proxies <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [part for part in forwarded if part]
    # Each trusted proxy appended the address it received from, so the client is the entry
    # that many places from the right.
    return forwarded[-proxies] if len(forwarded) >= proxies else remote
