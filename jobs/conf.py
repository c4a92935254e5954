"""The job engine's settings (``settings.JOBS``), with defaults for anything unset, and
which ``settings.TASKS`` entry is this engine's backend."""

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.tasks.base import DEFAULT_TASK_QUEUE_NAME
from django.utils.module_loading import import_string


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
    MAX_BATCH: int = 1000
    # Per executor: async handlers running at once on its event loop, and handler threads
    # for blocking tasks (0: blocking tasks run one at a time in the executor's main thread).
    ASYNC_CONCURRENCY: int = 50
    THREADS: int = 0
    # A job whose task does not import (a deploy rolling out) waits this long, retried with
    # backoff and using no attempt, before it goes dead (seconds).
    UNKNOWN_TASK_GRACE: float = 600.0
    REAPER_INTERVAL: float = 30.0
    SHUTDOWN_TIMEOUT: float = 30.0
    RETENTION_SUCCEEDED: float = 7 * 86400
    RETENTION_DEAD: float = 90 * 86400
    RETENTION_CANCELLED: float = 30 * 86400
    # The scheduler (jobs/scheduler/). An empty zone means settings.TIME_ZONE.
    SCHEDULER_TIME_ZONE: str = ""
    SCHEDULER_MAX_SLEEP: float = 60.0
    SCHEDULER_MISFIRE_GRACE: float = 60.0
    SCHEDULER_CATCHUP_LIMIT: int = 100
    RETENTION_FIRE_RECORDS: float = 30 * 86400
    # Code-declared schedules: name -> options (see jobs/scheduler/declared.py), or None to
    # drop a built-in or app-declared schedule of that name.
    SCHEDULES: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    # Named rate/concurrency limits: name -> {"rate": "100/s", "burst": 10,
    # "concurrency": 5, "per_key": False} (jobs/limits.py).
    LIMITS: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Enqueue prepares its INSERT once per connection. Turn off behind a pooler in
    # transaction mode that does not track prepared statements (PgBouncer < 1.21).
    PREPARED_STATEMENTS: bool = True
    # The deployment says DATABASE_URL goes through a pooler in transaction mode
    # (JOBS_POOLED). Unset, a worker that finds one refuses to start (jobs/pooler.py).
    POOLED: bool = False
    # A direct connection (libpq URL) for LISTEN when DATABASE_URL goes through a pooler in
    # transaction mode, which cannot keep a LISTEN; empty: LISTEN on the database's own.
    LISTEN_URL: str = ""
    # The worker registry's host name (empty: the machine's), for several hosts on one box.
    HOSTNAME: str = ""
    # A bearer token that may send workflow signals over HTTP besides staff ("" : staff only).
    WORKFLOW_SIGNAL_TOKEN: str = ""
    # A runworker serves Prometheus metrics on this port (0: off) and address.
    METRICS_PORT: int = 0
    METRICS_ADDR: str = "127.0.0.1"
    # Result files (jobs/files.py): the STORAGES alias they are written to, and how long
    # a download link the status API gives stays valid (seconds).
    RESULT_STORAGE: str = "default"
    DOWNLOAD_URL_MAX_AGE: float = 3600.0
    # The TASKS alias of this engine's backend when more than one entry uses it (empty:
    # the one entry whose BACKEND is jobs.backend.PostgresBackend or a subclass).
    BACKEND_ALIAS: str = ""


OUR_BACKEND = "jobs.backend.PostgresBackend"
# SQS's ceiling for a visibility timeout.
MAX_LEASE_SECONDS = 12 * 3600.0
# A lease is extended every third of its length; a late extension is noticed half an
# interval later and a new housekeeper (fork, connect, extend) has half a lease left to
# catch up. Below a second that is less time than a restart takes on a busy machine.
MIN_LEASE_SECONDS = 1.0
# A worker row not refreshed for this long belongs to a worker that is gone (the worker
# registry expires it; the console and the stats stop counting it).
WORKER_EXPIRE_AFTER_SECONDS = 120


@cache
def jobs_settings() -> JobsSettings:
    configured = getattr(settings, "JOBS", {})
    known = {f.name for f in fields(JobsSettings)}
    unknown = set(configured) - known
    if unknown:
        raise ValueError(f"unknown JOBS settings: {', '.join(sorted(unknown))}")
    return JobsSettings(**configured)


class BackendNotConfigured(ImproperlyConfigured):
    """settings.TASKS names no backend of this engine, or several without JOBS["BACKEND_ALIAS"]."""


@cache
def backend_alias() -> str:
    """The ``settings.TASKS`` alias of this engine's backend: a site may keep another
    default backend and name ours anything (``"jobs"``). JOBS["BACKEND_ALIAS"] picks one
    when several entries use it; otherwise the one entry whose BACKEND is ours."""
    # Read from settings.JOBS as it is, not jobs_settings(): the system checks ask this
    # too, and must report a bad JOBS setting rather than fail on it.
    jobs = getattr(settings, "JOBS", {})
    configured = jobs.get("BACKEND_ALIAS", "") if isinstance(jobs, Mapping) else ""
    tasks = getattr(settings, "TASKS", {})
    if configured:
        if configured not in ours_in(tasks):
            raise BackendNotConfigured(
                f'JOBS["BACKEND_ALIAS"] is {configured!r}, which is not a TASKS entry whose BACKEND '
                f"is jobs.backend.PostgresBackend"
            )
        return configured
    aliases = ours_in(tasks)
    if len(aliases) == 1:
        return aliases[0]
    if not aliases:
        raise BackendNotConfigured(
            'no TASKS entry uses jobs.backend.PostgresBackend (e.g. TASKS = {"default": '
            '{"BACKEND": "jobs.backend.PostgresBackend"}})'
        )
    raise BackendNotConfigured(
        f"TASKS entries {', '.join(aliases)} all use jobs.backend.PostgresBackend: say which one "
        f'workers, schedules and workflows use with JOBS["BACKEND_ALIAS"]'
    )


def ours_in(tasks: Mapping[str, Any]) -> list[str]:
    """The aliases in a TASKS setting whose BACKEND is this engine's (or a subclass)."""
    # Compared by name along the class's MRO, not with issubclass: importing jobs.backend
    # here would make the worker (which reads these settings) depend on the enqueue side.
    found = []
    for alias, entry in tasks.items():
        path = entry.get("BACKEND", "") if isinstance(entry, Mapping) else ""
        try:
            backend_class = import_string(path)
        except ImportError:
            continue
        if isinstance(backend_class, type) and any(
            f"{c.__module__}.{c.__qualname__}" == OUR_BACKEND for c in backend_class.__mro__
        ):
            found.append(alias)
    return found


def backend_queues() -> list[str]:
    """The queues our backend accepts (its TASKS entry's QUEUES), as Django reads them:
    unset is ``["default"]``; empty means any name (then workers default to "default")."""
    entry = getattr(settings, "TASKS", {}).get(backend_alias(), {})
    return list(entry.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME]))


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBS":
        jobs_settings.cache_clear()
    if setting in {"JOBS", "TASKS"}:
        backend_alias.cache_clear()


setting_changed.connect(_reload)
