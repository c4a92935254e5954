"""manage.py check on the push settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from notifications.push.checks import PLATFORM_BACKEND, check_push_settings


def ids(settings: Any, **push: Any) -> list[str]:
    settings.PUSH = {"BACKEND": PLATFORM_BACKEND, **push}
    return [message.id for message in check_push_settings()]


def test_development_backends_need_nothing(settings: Any) -> None:
    settings.PUSH = {"BACKEND": "notifications.push.providers.console.ConsoleBackend"}
    assert check_push_settings() == []


def test_a_production_backend_with_nothing_configured_is_a_warning(settings: Any) -> None:
    assert ids(settings) == ["push.W002"]


def test_missing_and_partial_credentials_are_errors(settings: Any, tmp_path: Path) -> None:
    assert ids(settings, APNS_KEY_FILE="/nope/AuthKey.p8", APNS_TOPIC="com.example") == [
        "push.E001",
        "push.E002",
    ]
    key = tmp_path / "AuthKey.p8"
    key.write_text("-----BEGIN PRIVATE KEY-----")
    assert ids(settings, APNS_KEY_FILE=str(key), APNS_KEY_ID="K", APNS_TEAM_ID="T") == ["push.W001"]
    broken = tmp_path / "sa.json"
    broken.write_text(json.dumps({"project_id": "p"}))
    assert ids(settings, FCM_CREDENTIALS_FILE=str(broken)) == ["push.E003"]
    assert ids(settings, FCM_CREDENTIALS_FILE=str(tmp_path / "none.json"), CA_BUNDLE="/nope.pem") == [
        "push.E003",
        "push.E004",
    ]
