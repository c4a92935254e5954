"""The job engine's settings (``settings.JOBS``), with defaults for anything unset."""

from dataclasses import dataclass, fields

from django.conf import settings


@dataclass(frozen=True, slots=True)
class JobsSettings:
    LEASE_SECONDS: float = 300.0
    POLL_INTERVAL: float = 2.0
    LISTEN: bool = True
    DEFAULT_MAX_ATTEMPTS: int = 5
    BACKOFF_BASE: float = 2.0
    BACKOFF_CAP: float = 3600.0
    DEFAULT_TIMEOUT: float = 0.0
    MAX_PAYLOAD_BYTES: int = 64 * 1024
    PREFETCH_HORIZON: float = 0.05
    MAX_BATCH: int = 200
    REAPER_INTERVAL: float = 30.0
    SHUTDOWN_TIMEOUT: float = 30.0
    RETENTION_SUCCEEDED: float = 7 * 86400
    RETENTION_DEAD: float = 90 * 86400
    RETENTION_CANCELLED: float = 30 * 86400


# SQS's ceiling for a visibility timeout.
MAX_LEASE_SECONDS = 12 * 3600.0


def jobs_settings() -> JobsSettings:
    configured = getattr(settings, "JOBS", {})
    known = {f.name for f in fields(JobsSettings)}
    unknown = set(configured) - known
    if unknown:
        raise ValueError(f"unknown JOBS settings: {', '.join(sorted(unknown))}")
    return JobsSettings(**configured)
