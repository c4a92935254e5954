"""Checks of what callers hand us: device registrations and notification content.

Everything a provider would refuse for its shape is refused here, with a message that says
what to change, before a row or a job is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from . import payloads
from .exceptions import InvalidDevice, InvalidNotification, PayloadTooLarge
from .models import Platform

# APNs device tokens are 32 bytes today, written as hex; Apple says they may grow.
APNS_TOKEN = re.compile(r"[0-9a-fA-F]{64,200}")
# FCM registration tokens: URL-safe base64 letters plus ':' (e.g. "<instance id>:APA91b...").
FCM_TOKEN = re.compile(r"[A-Za-z0-9_:-]{100,4096}")
MAX_APP_ID = 255
LOCALE = re.compile(r"[A-Za-z]{2,8}([_-][A-Za-z0-9]{1,8})*")
# Data keys the providers keep for themselves.
RESERVED_KEYS = frozenset({"aps", "from", "notification", "message_type", "collapse_key"})
RESERVED_PREFIXES = ("google", "gcm")


@dataclass(frozen=True, slots=True)
class DeviceFields:
    platform: str
    token: str
    app_id: str
    locale: str


def device_fields(*, platform: Any, token: Any, app_id: Any = "", locale: Any = "") -> DeviceFields:
    """The registration, normalized (APNs tokens lower-case), or InvalidDevice with every error."""
    errors: dict[str, list[str]] = {}
    if platform not in Platform.values:
        errors["platform"] = [f"must be one of: {', '.join(Platform.values)}."]
    if not isinstance(token, str) or not token.strip():
        errors["token"] = ["is required."]
    else:
        token = token.strip()
        if platform == Platform.IOS and not (APNS_TOKEN.fullmatch(token) and len(token) % 2 == 0):
            errors["token"] = ["an APNs device token is an even number (64 or more) of hex characters."]
        elif platform == Platform.ANDROID and not FCM_TOKEN.fullmatch(token):
            errors["token"] = [
                "an FCM registration token is 100 to 4096 characters of letters, digits, '_', '-' and ':'."
            ]
    app_id = "" if app_id is None else app_id
    if not isinstance(app_id, str) or len(app_id) > MAX_APP_ID or any(c.isspace() for c in app_id):
        errors["app_id"] = [f"must be a bundle id or package name of at most {MAX_APP_ID} characters."]
    locale = "" if locale is None else locale
    if not isinstance(locale, str) or (locale and not LOCALE.fullmatch(locale)):
        errors["locale"] = ["must be a language tag such as 'en', 'id-ID' or 'pt_BR'."]
    if errors:
        raise InvalidDevice(errors)
    if platform == Platform.IOS:
        token = token.lower()
    return DeviceFields(platform=platform, token=token, app_id=app_id, locale=locale)


@dataclass(frozen=True, slots=True)
class Content:
    title: str
    body: str
    data: dict[str, str]
    expires_at: datetime | None
    collapse_key: str


def content(
    *,
    title: Any,
    body: Any,
    data: Any = None,
    expires_at: Any = None,
    collapse_key: Any = None,
    now: datetime | None = None,
) -> Content:
    """The notification's content if every provider can take it, else InvalidNotification."""
    for name, value in (("title", title), ("body", body)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidNotification(f"{name} must be a non-empty string.", field=name)
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise InvalidNotification(f"data must be a dict of strings, not {type(data).__name__}.", field="data")
    for key, value in data.items():
        if not isinstance(key, str) or not key:
            raise InvalidNotification(f"data keys must be non-empty strings, not {key!r}.", field="data")
        if key in RESERVED_KEYS or key.lower().startswith(RESERVED_PREFIXES):
            raise InvalidNotification(
                f"data key {key!r} is reserved by APNs or FCM; choose another name.", field="data"
            )
        if not isinstance(value, str):
            raise InvalidNotification(
                f"data[{key!r}] must be a string (FCM carries strings only); encode it, e.g. as JSON.",
                field="data",
            )
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or timezone.is_naive(expires_at):
            raise InvalidNotification("expires_at must be an aware datetime.", field="expires_at")
        if expires_at <= (now or timezone.now()):
            raise InvalidNotification(
                f"expires_at ({expires_at.isoformat()}) is already past.", field="expires_at"
            )
    collapse_key = collapse_key or ""
    if not isinstance(collapse_key, str) or len(collapse_key.encode()) > payloads.MAX_COLLAPSE_KEY_BYTES:
        raise InvalidNotification(
            f"collapse_key must be a string of at most {payloads.MAX_COLLAPSE_KEY_BYTES} bytes.",
            field="collapse_key",
        )
    for provider, size in payloads.sizes(title=title, body=body, data=data).items():
        limit = payloads.LIMITS[provider]
        if size > limit:
            raise PayloadTooLarge(
                f"the {provider} payload would be {size:,} bytes; {provider} accepts at most {limit:,}. "
                "Shorten the title, body or data (send an id and let the app fetch the rest)."
            )
    return Content(title=title, body=body, data=dict(data), expires_at=expires_at, collapse_key=collapse_key)
