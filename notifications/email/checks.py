"""Deploy checks for email: a public site whose mail goes nowhere loses every signup."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register

NOT_SENDING = {
    "django.core.mail.backends.console.EmailBackend": "prints messages to the console",
    "django.core.mail.backends.locmem.EmailBackend": "keeps messages in memory",
    "django.core.mail.backends.dummy.EmailBackend": "drops messages",
    "django.core.mail.backends.filebased.EmailBackend": "writes messages to files",
    "notifications.email.outbox.OutboxBackend": "keeps messages in the development outbox",
}


@register(Tags.security, deploy=True)
def email_is_sent(app_configs: Any, **kwargs: Any) -> list[Warning]:
    backend = settings.MAILERS.get("default", {}).get("BACKEND", "")
    what = NOT_SENDING.get(backend)
    if what is None:
        return []
    return [
        Warning(
            f"EMAIL_BACKEND {what}: verification and password-reset emails never reach anyone.",
            hint="Set EMAIL_URL=smtp+tls://user:password@host:587, or EMAIL_BACKEND to an anymail backend.",
            id="notifications.W001",
        )
    ]
