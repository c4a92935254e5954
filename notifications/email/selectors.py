"""Reads of delivery records."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.utils import timezone

from .models import EmailDelivery


def recent_request_job(*, request_key: str, window: float, now: datetime | None = None) -> uuid.UUID | None:
    """The job of the newest email API request with this key within the window, if any."""
    since = (now or timezone.now()) - timedelta(seconds=window)
    return (
        EmailDelivery.objects.filter(request_key=request_key, created_at__gte=since, job_id__isnull=False)
        .order_by("-created_at")
        .values_list("job_id", flat=True)
        .first()
    )
