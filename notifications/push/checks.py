"""System checks (``manage.py check``): a production push backend whose key files are
missing fails at deploy, not at the first push."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core import checks

from .conf import push_settings

PLATFORM_BACKEND = "notifications.push.providers.platforms.PlatformBackend"


@checks.register("push")
def check_push_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    conf = push_settings()
    if conf.BACKEND != PLATFORM_BACKEND:
        return []
    problems: list[checks.CheckMessage] = []
    apns = (conf.APNS_KEY_FILE, conf.APNS_KEY_ID, conf.APNS_TEAM_ID)
    if any(apns) and not all(apns):
        problems.append(
            checks.Error(
                "APNs needs PUSH_APNS_KEY_FILE, PUSH_APNS_KEY_ID and PUSH_APNS_TEAM_ID together.",
                id="push.E001",
            )
        )
    if conf.APNS_KEY_FILE and not Path(conf.APNS_KEY_FILE).is_file():
        problems.append(
            checks.Error(f"PUSH_APNS_KEY_FILE {conf.APNS_KEY_FILE!r} is not a file.", id="push.E002")
        )
    if conf.APNS_KEY_FILE and not conf.APNS_TOPIC:
        problems.append(
            checks.Warning(
                "PUSH_APNS_TOPIC is empty: only devices registered with an app_id can be reached.",
                id="push.W001",
            )
        )
    if conf.FCM_CREDENTIALS_FILE:
        try:
            info = json.loads(Path(conf.FCM_CREDENTIALS_FILE).read_text())
            missing = [
                key for key in ("project_id", "client_email", "private_key", "token_uri") if not info.get(key)
            ]
        except (OSError, ValueError, AttributeError) as exc:
            missing = [f"a readable JSON key ({exc})"]
        if missing:
            problems.append(
                checks.Error(
                    f"PUSH_FCM_CREDENTIALS_FILE {conf.FCM_CREDENTIALS_FILE!r} lacks {', '.join(missing)}.",
                    id="push.E003",
                )
            )
    if not conf.APNS_KEY_FILE and not conf.FCM_CREDENTIALS_FILE:
        problems.append(
            checks.Warning(
                "PUSH_BACKEND sends through APNs and FCM, but neither is configured.", id="push.W002"
            )
        )
    if conf.CA_BUNDLE and not Path(conf.CA_BUNDLE).is_file():
        problems.append(checks.Error(f"PUSH_CA_BUNDLE {conf.CA_BUNDLE!r} is not a file.", id="push.E004"))
    return problems
