"""What goes over the wire to each provider, and the providers' size limits.

Built here once for both sides: ``services.notify_users`` checks the sizes before anything
is enqueued, and the providers send exactly what was checked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

# APNs refuses a remote notification payload over 4 KB (PayloadTooLarge, 413).
APNS_MAX_BYTES = 4096
# FCM refuses a message whose notification and data parts exceed 4 KB.
FCM_MAX_BYTES = 4096
# APNs' limit for apns-collapse-id; FCM allows no more than this either, in practice.
MAX_COLLAPSE_KEY_BYTES = 64


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def apns_payload(*, title: str, body: str, data: Mapping[str, str]) -> bytes:
    """The JSON body of ``POST /3/device/<token>``: the alert in ``aps``, custom keys beside it."""
    return _compact({"aps": {"alert": {"title": title, "body": body}, "sound": "default"}, **data})


def fcm_content(*, title: str, body: str, data: Mapping[str, str]) -> dict[str, Any]:
    """The notification and data parts of an FCM v1 message (what its size limit counts)."""
    content: dict[str, Any] = {"notification": {"title": title, "body": body}}
    if data:
        content["data"] = dict(data)
    return content


def fcm_message(
    *,
    token: str,
    title: str,
    body: str,
    data: Mapping[str, str],
    collapse_key: str = "",
    ttl_seconds: float | None = None,
    package: str = "",
) -> bytes:
    """The JSON body of ``POST /v1/projects/<id>/messages:send``."""
    android: dict[str, Any] = {"priority": "high"}
    if ttl_seconds is not None:
        android["ttl"] = f"{max(0, math.ceil(ttl_seconds))}s"
    if collapse_key:
        android["collapse_key"] = collapse_key
    if package:
        android["restricted_package_name"] = package
    return _compact(
        {"message": {"token": token, **fcm_content(title=title, body=body, data=data), "android": android}}
    )


def sizes(*, title: str, body: str, data: Mapping[str, str]) -> dict[str, int]:
    """Bytes each provider's limit counts for this content."""
    return {
        "APNs": len(apns_payload(title=title, body=body, data=data)),
        "FCM": len(_compact(fcm_content(title=title, body=body, data=data))),
    }


LIMITS = {"APNs": APNS_MAX_BYTES, "FCM": FCM_MAX_BYTES}


def apns_expiration(expires_at: datetime | None) -> str | None:
    """apns-expiration: the UNIX time after which APNs stops trying (absent: APNs' default)."""
    return None if expires_at is None else str(max(1, math.floor(expires_at.timestamp())))
