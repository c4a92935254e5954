"""System checks (``manage.py check``, ``migrate``, and every runworker start): a setting the
engine cannot use fails here, with its name, instead of in a worker that is already running.

jobs.E001  JOBS["LISTEN_URL"] is not a URL libpq can read
jobs.E002  settings.JOBS is not a dict, or names a setting the engine does not have
jobs.E003  a JOBS setting of the wrong type
jobs.E004  a JOBS setting out of range
jobs.E005  settings.TASKS has no entry of this engine's backend, or several and no BACKEND_ALIAS
jobs.E006  django.contrib.postgres is not installed (Job and Worker have ArrayFields)
jobs.E007  JOBS["SCHEDULER_TIME_ZONE"] is not a time zone
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import psycopg
from django.apps import apps
from django.conf import settings
from django.core import checks
from psycopg.conninfo import conninfo_to_dict

from .conf import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS, BackendNotConfigured, JobsSettings, backend_alias

# The range each numeric setting must be in: (test, what the test asks for).
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "LEASE_SECONDS": (
        lambda v: MIN_LEASE_SECONDS <= v <= MAX_LEASE_SECONDS,
        f"between {MIN_LEASE_SECONDS:g} and {MAX_LEASE_SECONDS:g} seconds",
    ),
    "POLL_INTERVAL": (lambda v: v > 0, "more than 0 seconds"),
    "DEFAULT_MAX_ATTEMPTS": (lambda v: v >= 1, "at least 1"),
    "BACKOFF_BASE": (lambda v: v > 0, "more than 0 seconds"),
    "BACKOFF_CAP": (lambda v: v > 0, "more than 0 seconds"),
    "DEFAULT_TIMEOUT": (lambda v: v >= 0, "0 (no limit) or more seconds"),
    "MAX_PAYLOAD_BYTES": (lambda v: v >= 1, "at least 1 byte"),
    "PREFETCH_HORIZON": (lambda v: v >= 0, "0 or more seconds"),
    "MAX_BATCH": (lambda v: v >= 1, "at least 1"),
    "ASYNC_CONCURRENCY": (lambda v: v >= 1, "at least 1"),
    "THREADS": (lambda v: v >= 0, "0 or more"),
    "UNKNOWN_TASK_GRACE": (lambda v: v >= 0, "0 or more seconds"),
    "REAPER_INTERVAL": (lambda v: v > 0, "more than 0 seconds"),
    "SHUTDOWN_TIMEOUT": (lambda v: v >= 0, "0 or more seconds"),
    "RETENTION_SUCCEEDED": (lambda v: v > 0, "more than 0 seconds"),
    "RETENTION_DEAD": (lambda v: v > 0, "more than 0 seconds"),
    "RETENTION_CANCELLED": (lambda v: v > 0, "more than 0 seconds"),
    "SCHEDULER_MAX_SLEEP": (lambda v: v > 0, "more than 0 seconds"),
    "SCHEDULER_MISFIRE_GRACE": (lambda v: v >= 0, "0 or more seconds"),
    "SCHEDULER_CATCHUP_LIMIT": (lambda v: v >= 0, "0 or more"),
    "RETENTION_FIRE_RECORDS": (lambda v: v > 0, "more than 0 seconds"),
    "METRICS_PORT": (lambda v: 0 <= v <= 65535, "a port number (0: off)"),
    "DOWNLOAD_URL_MAX_AGE": (lambda v: v > 0, "more than 0 seconds"),
}


@checks.register("jobs")
def check_postgres_app(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if apps.is_installed("django.contrib.postgres"):
        return []
    return [
        checks.Error(
            'the jobs app needs "django.contrib.postgres" in INSTALLED_APPS '
            "(its Job and Worker models use ArrayField)",
            hint='INSTALLED_APPS += ["django.contrib.postgres"]',
            id="jobs.E006",
        )
    ]


@checks.register("jobs")
def check_backend(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        backend_alias()
    except BackendNotConfigured as exc:
        return [checks.Error(f"{exc}.", id="jobs.E005")]
    return []


@checks.register("jobs")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    configured = getattr(settings, "JOBS", {})
    if not isinstance(configured, Mapping):
        return [
            checks.Error(f"settings.JOBS must be a dict, not {type(configured).__name__}.", id="jobs.E002")
        ]
    known = {f.name: f for f in fields(JobsSettings)}
    errors: list[checks.CheckMessage] = []
    for name in sorted(set(configured) - set(known)):
        errors.append(
            checks.Error(
                f"JOBS[{name!r}] is not a setting of the jobs app.",
                hint="the settings reference lists them all",
                id="jobs.E002",
            )
        )
    for name, value in configured.items():
        if name not in known:
            continue
        expected = _expected_type(known[name])
        if not _is_a(value, expected):
            errors.append(
                checks.Error(
                    f"JOBS[{name!r}] must be {_type_words(expected)}, not {value!r:.80}.", id="jobs.E003"
                )
            )
            continue
        rule = _RANGES.get(name)
        if rule is not None and not rule[0](value):
            errors.append(checks.Error(f"JOBS[{name!r}] must be {rule[1]}, not {value!r}.", id="jobs.E004"))
    zone = configured.get("SCHEDULER_TIME_ZONE")
    if isinstance(zone, str) and zone and not _is_zone(zone):
        errors.append(
            checks.Error(f"JOBS['SCHEDULER_TIME_ZONE'] is not a time zone: {zone!r}.", id="jobs.E007")
        )
    return errors


@checks.register("jobs")
def check_listen_url(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    configured = getattr(settings, "JOBS", {})
    url = configured.get("LISTEN_URL", "") if isinstance(configured, Mapping) else ""
    if not url or not isinstance(url, str):
        return []
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        return [
            checks.Error(
                f"JOBS_LISTEN_URL is not a connection URL libpq can read: {exc}",
                hint="e.g. postgres://user@db-primary:5432/dbname (a direct connection, past the pooler)",
                id="jobs.E001",
            )
        ]
    return []


def _expected_type(field: Any) -> type:
    """The setting's type as JobsSettings declares it (a float setting whose default is a
    whole number, such as a retention in seconds, takes any number)."""
    declared = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    default = field.default
    if isinstance(default, bool):
        return bool
    if "float" in declared or isinstance(default, float):
        return float
    if isinstance(default, int):
        return int
    if isinstance(default, str):
        return str
    return Mapping


def _is_a(value: Any, expected: type) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def _type_words(expected: type) -> str:
    return {bool: "True or False", float: "a number", int: "a whole number", str: "a string"}.get(
        expected, "a dict"
    )


def _is_zone(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True
