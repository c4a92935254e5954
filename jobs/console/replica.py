"""Console reads from a streaming replica (``DATABASE_REPLICA_URL``), and its lag.

The replica serves read views only: the status API, the job list and the dashboard (the
view names in ``settings.JOBS_REPLICA_VIEWS``, or any code inside ``using_replica()``).
Only the job engine's own tables are read there; sessions and users stay on the primary, so
a login is never lost to lag. Writes, claims and everything the worker does go to the
primary, whatever the context (jobs/routers.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.http import HttpRequest, HttpResponse

REPLICA = "replica"

_reads_from_replica: ContextVar[bool] = ContextVar("jobs_reads_from_replica", default=False)


def configured() -> bool:
    """Whether a replica is configured (``DATABASE_REPLICA_URL``)."""
    return REPLICA in settings.DATABASES


def reading_from_replica() -> bool:
    return _reads_from_replica.get() and configured()


@contextlib.contextmanager
def using_replica() -> Iterator[None]:
    """Reads of the job tables inside this block go to the replica, when one is configured."""
    token = _reads_from_replica.set(True)
    try:
        yield
    finally:
        _reads_from_replica.reset(token)


def lag_seconds() -> float | None:
    """How far the replica's replay is behind the primary, in seconds (0.0 when it has
    replayed all it received); None without a replica, when it cannot be reached, or when it
    is no longer in recovery (promoted: it is a primary now)."""
    if not configured():
        return None
    try:
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(
                "SELECT pg_is_in_recovery(), CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() "
                "THEN 0 ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END"
            )
            in_recovery, lag = cursor.fetchone()
    except DatabaseError:
        return None
    if not in_recovery:
        return None
    return max(0.0, float(lag or 0.0))


class ReplicaReadsMiddleware:
    """GET and HEAD requests to the views named in ``settings.JOBS_REPLICA_VIEWS`` read the
    job tables from the replica."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        finally:
            token = request.__dict__.pop("_jobs_replica_token", None)
            if token is not None:
                _reads_from_replica.reset(token)

    def process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: Any) -> None:
        match = request.resolver_match
        if (
            request.method in ("GET", "HEAD")
            and match is not None
            and match.view_name in settings.JOBS_REPLICA_VIEWS
            and configured()
        ):
            request.__dict__["_jobs_replica_token"] = _reads_from_replica.set(True)
