"""Sending one message through Django's email framework, and what a provider's error means.

Django's default mailer (settings.MAILERS["default"]) does the sending: SMTP (EMAIL_TIMEOUT
on every socket call) or an HTTP provider through django-anymail (the same timeout, as
ANYMAIL["REQUESTS_TIMEOUT"]). The result is the provider's
message id; the errors are sorted into three kinds for delivery.py:

* PermanentFailure: sending again cannot help (SMTP 5xx for the recipient or the content,
  anymail's rejected or invalid recipients, an address the provider cannot parse);
* ProviderBusy: the provider named a time to come back (HTTP 429 or 503 with Retry-After);
* anything else (connection refused, timeouts, 4xx on the greeting, HTTP 5xx...): retried
  with the job's backoff.
"""

from __future__ import annotations

import email.utils
import hashlib
import smtplib
from collections.abc import Mapping

from anymail.exceptions import AnymailAPIError, AnymailInvalidAddress, AnymailRecipientsRefused
from django.conf import settings
from django.core.mail import EmailMultiAlternatives, mailers
from django.utils import timezone

from ..exceptions import PermanentFailure, ProviderBusy
from .catalog import RenderedEmail

# Recipient statuses anymail reports for a message that will never be delivered.
REFUSED_STATUSES = frozenset({"rejected", "invalid"})


def build_message(rendered: RenderedEmail, *, to: str, message_key: str) -> EmailMultiAlternatives:
    """The message with a Message-ID derived from its key: a copy sent again after a crash
    (see delivery.py) carries the same id, which lets mail clients show it once."""
    message = EmailMultiAlternatives(
        subject=rendered.subject,
        body=rendered.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[to],
        headers={"Message-ID": message_id(message_key)},
    )
    message.attach_alternative(rendered.html, "text/html")
    return message


def message_id(message_key: str) -> str:
    domain = email.utils.parseaddr(settings.DEFAULT_FROM_EMAIL)[1].rpartition("@")[2] or "localhost"
    return f"<{hashlib.sha256(message_key.encode()).hexdigest()[:32]}@{domain}>"


def send(message: EmailMultiAlternatives) -> str:
    """Send ``message``; return the provider's message id (for SMTP, our Message-ID)."""
    try:
        mailers.default.send_messages([message])
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        if codes and all(code >= 500 for code in codes):
            raise PermanentFailure(f"recipient refused: {_smtp_reasons(exc.recipients)}") from exc
        raise
    except smtplib.SMTPDataError as exc:
        if exc.smtp_code >= 500:
            raise PermanentFailure(f"message refused: {exc.smtp_code} {_text(exc.smtp_error)}") from exc
        raise
    except (AnymailRecipientsRefused, AnymailInvalidAddress) as exc:
        raise PermanentFailure(f"provider refused the recipient: {exc}") from exc
    except AnymailAPIError as exc:
        after = _retry_after(exc)
        if after is not None:
            raise ProviderBusy(f"provider busy ({exc.status_code}): {exc}", after=after) from exc
        raise
    status = getattr(message, "anymail_status", None)
    if status is None:
        return str(message.extra_headers["Message-ID"])
    if status.status and status.status <= REFUSED_STATUSES:
        raise PermanentFailure(f"provider refused the recipient: status {sorted(status.status)}")
    provider_id = status.message_id
    if isinstance(provider_id, set):
        provider_id = ",".join(sorted(str(one) for one in provider_id))
    return str(provider_id or message.extra_headers["Message-ID"])


def _retry_after(exc: AnymailAPIError) -> float | None:
    response = getattr(exc, "response", None)
    if response is None or exc.status_code not in (429, 503):
        return None
    header = response.headers.get("Retry-After", "")
    if header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(1.0, (when - timezone.now()).total_seconds())


def _smtp_reasons(recipients: Mapping[str, tuple[int, bytes | str]]) -> str:
    return "; ".join(f"{address}: {code} {_text(text)}" for address, (code, text) in recipients.items())


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
