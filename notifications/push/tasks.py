"""The job that sends one push delivery (``sending.deliver``)."""

from typing import Any

from django.tasks import task

from .conf import push_settings
from .exceptions import ProviderNotConfigured
from .sending import claim_seconds, deliver


# iOS and Android deliveries each run under their provider's named limit, "apns" or "fcm"
# (JOBS_LIMIT_APNS_RATE, JOBS_LIMIT_FCM_RATE), set where services.notify_users enqueues.
@task(  # type: ignore[call-overload]  # the engine's options are not in the stubs
    queue_name="push",
    max_attempts=push_settings().MAX_ATTEMPTS,
    # A hard limit just past the delivery's claim, so a hung send cannot hold an executor.
    timeout=claim_seconds() + 5,
    non_retryable=(ProviderNotConfigured,),
)
def send_push(delivery_id: str) -> dict[str, Any]:
    return deliver(delivery_id=delivery_id)
