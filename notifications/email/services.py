"""Accepting an email for sending: the delivery record and its job, in one transaction."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs.observe import current_trace, trace_id_of
from jobs.ownership import owner_key

from . import catalog, selectors
from .delivery import prepare
from .tasks import send_email


@dataclass(frozen=True)
class QueuedEmail:
    job_id: str
    trace_id: str
    # True when the message_key was used within the window: job_id is that request's job.
    duplicate: bool = False


class _Duplicate(Exception):
    """Rolls back a request whose message_key an unfinished job already holds."""

    def __init__(self, job_id: str):
        self.job_id = job_id


def queue_api_email(
    *, to: str, template: str, variables: Mapping[str, Any], owner: Any, message_key: str | None = None
) -> QueuedEmail:
    """Accept one email from an API caller (``owner``, a user); nothing is sent here.

    ``message_key`` makes the request idempotent for NOTIFICATIONS_EMAIL_API_DEDUPE_WINDOW
    seconds: the engine's dedupe key answers while the first job is unfinished, the
    delivery records once it has finished. Keys are per owner."""
    found = catalog.get_template(template)
    catalog.check_variables(found, variables)
    owner_id = owner_key(owner)
    window = settings.NOTIFICATIONS_EMAIL_API_DEDUPE_WINDOW
    request_key = f"{owner_id}:{message_key}" if message_key else None
    # The request's trace (jobs.observe), so the caller can follow it into the job.
    trace_id = trace_id_of(current_trace.get() or "") or uuid.uuid4().hex
    try:
        with transaction.atomic():
            if request_key:
                earlier = selectors.recent_request_job(request_key=request_key, window=window)
                if earlier is not None:
                    return QueuedEmail(job_id=str(earlier), trace_id="", duplicate=True)
            delivery = prepare(
                message_key=f"api:{uuid.uuid4()}",
                purpose="api",
                template=template,
                to=to,
                user=owner,
                owner=owner_id,
                request_key=request_key,
                variables=variables,
            )
            options: dict[str, Any] = {"owner": owner, "trace_id": trace_id}
            if request_key:
                options.update(dedupe_key=f"email-api:{request_key}", dedupe_window=window)
            result = send_email.using(**options).enqueue(delivery.pk)
            if result.deduplicated:
                raise _Duplicate(result.id)
            delivery.job_id = uuid.UUID(result.id)
            delivery.save(update_fields=["job_id"])
    except _Duplicate as duplicate:
        return QueuedEmail(job_id=duplicate.job_id, trace_id="", duplicate=True)
    return QueuedEmail(job_id=result.id, trace_id=trace_id)
