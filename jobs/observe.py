"""What the engine tells observability, at the cost of a context-variable read when nobody
listens: the trace the current code runs in, and jobs enqueued.

The trace: a web request sets it (jobs.middleware.TraceMiddleware, from its W3C
``traceparent`` or ``X-Request-ID``), the worker sets it around each handler from the job's
row, and every job enqueued meanwhile stores it (jobs.backend), so one request can be
followed into its jobs, their retries and the jobs they enqueue.

A job's ``trace_id`` column holds the trace id, or, when OpenTelemetry made a producer span
for the enqueue (jobs.otel), the whole ``traceparent`` of that span so that the attempt's
span can link to it; ``trace_id_of`` reads the trace id back from either.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar

# The trace id (or the enqueue's traceparent, see above) of the code running now.
current_trace: ContextVar[str | None] = ContextVar("jobs_trace", default=None)

# Called with (task path, count) after jobs are inserted, when this process counts them.
enqueued_sink: Callable[[str, int], None] | None = None

TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
# An incoming X-Request-ID is taken as the trace id only if it is this plain (it goes into
# log lines and job rows as it is).
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def set_enqueued_sink(sink: Callable[[str, int], None] | None) -> None:
    global enqueued_sink
    enqueued_sink = sink


def parse_traceparent(value: str | None) -> tuple[str, str, str] | None:
    """(trace id, parent span id, flags) of a valid W3C traceparent, else None."""
    if not value:
        return None
    match = TRACEPARENT.match(value.strip().lower())
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return trace_id, span_id, flags


def trace_from_headers(traceparent: str | None, request_id: str | None) -> str:
    """The trace a request joins: its traceparent's trace id, else its X-Request-ID, else a
    new one (32 hex digits, a valid W3C trace id)."""
    parsed = parse_traceparent(traceparent)
    if parsed is not None:
        return parsed[0]
    if request_id and REQUEST_ID.match(request_id):
        return request_id
    return uuid.uuid4().hex


def trace_id_of(stored: str) -> str:
    """The trace id in a job's ``trace_id`` column (a bare id or a traceparent)."""
    parsed = parse_traceparent(stored) if len(stored) == 55 else None
    return parsed[0] if parsed is not None else stored


def job_trace(stored: str, job_id: uuid.UUID) -> str:
    """The trace a job belongs to: the trace id in its ``trace_id`` column, or, where that
    is empty, the job's own id as hex. A job that joined no trace starts its own, and its
    row does not repeat the id (33 bytes of every version the job's updates write); the
    claim reads the column back the same way (jobs/sql/claim.sql)."""
    return trace_id_of(stored) or job_id.hex
