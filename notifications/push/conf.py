"""Push settings (``settings.PUSH``), with defaults for anything unset."""

from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed


@dataclass(frozen=True, slots=True)
class PushSettings:
    BACKEND: str = "notifications.push.providers.console.ConsoleBackend"
    APNS_BASE_URL: str = "https://api.sandbox.push.apple.com"
    APNS_KEY_FILE: str = ""
    APNS_KEY_ID: str = ""
    APNS_TEAM_ID: str = ""
    APNS_TOPIC: str = ""
    FCM_BASE_URL: str = "https://fcm.googleapis.com"
    FCM_CREDENTIALS_FILE: str = ""
    CA_BUNDLE: str = ""
    CONNECT_TIMEOUT: float = 5.0
    REQUEST_TIMEOUT: float = 10.0
    MAX_ATTEMPTS: int = 8


@cache
def push_settings() -> PushSettings:
    configured = getattr(settings, "PUSH", {})
    known = {f.name for f in fields(PushSettings)}
    unknown = set(configured) - known
    if unknown:
        raise ValueError(f"unknown PUSH settings: {', '.join(sorted(unknown))}")
    return PushSettings(**configured)


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "PUSH":
        push_settings.cache_clear()


setting_changed.connect(_reload)
