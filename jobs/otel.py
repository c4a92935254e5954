"""OpenTelemetry spans, only when asked for: ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (spans go
there over OTLP/HTTP; the exporter package must be installed) or
``OTEL_TRACES_EXPORTER=console`` (one JSON span per line on standard output), and the SDK
importable. Otherwise nothing of OpenTelemetry is imported and each hook is one check.

* the web request: a server span, the child of the request's ``traceparent``;
* each enqueued job: a producer span (``send``), the child of whatever span is current;
  its ``traceparent`` is stored in the job's ``trace_id`` column (jobs.observe);
* each attempt: a consumer span (``process``) in the worker, the child of that producer
  span and linked to it, so a request's trace holds its jobs and their retries.

Attributes follow the messaging semantic conventions (``messaging.system``,
``messaging.operation.type``, ``messaging.destination.name``, ``messaging.message.id``).
Spans are set up per process, when first needed: after the worker's fork, never before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import observe

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

    from .store import Claimed, NewJob

logger = logging.getLogger("jobs.otel")

SYSTEM = "jobqueue"
_UNSET: Any = object()
_tracer: Any = _UNSET
_provider: Any = None


def wanted() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")) or (
        os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console"
    )


def enabled() -> bool:
    global _tracer
    if _tracer is _UNSET:
        _tracer = _setup() if wanted() else None
    return _tracer is not None


def _setup() -> Any:
    global _provider
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError as exc:
        logger.warning("event=otel_unavailable error=%r", str(exc))
        return None
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", SYSTEM)})
    )
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + "\n")
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            logger.warning("event=otel_unavailable error=%r", str(exc))
            return None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider = provider
    trace.set_tracer_provider(provider)
    return trace.get_tracer("jobs")


def flush() -> None:
    """Send what is buffered (a worker's processes leave by os._exit)."""
    if _provider is not None:
        _provider.force_flush(5000)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _traceparent(span: Any) -> str:
    context = span.get_span_context()
    return f"00-{_hex(context.trace_id, 32)}-{_hex(context.span_id, 16)}-{_hex(int(context.trace_flags), 2)}"


def request_span(
    request: HttpRequest, traceparent: str | None, get_response: Callable[[HttpRequest], HttpResponse]
) -> tuple[HttpResponse, str]:
    """Answer ``request`` in a server span; (response, the span's trace id)."""
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent}) if traceparent else None
    with _tracer.start_as_current_span(
        request.method or "HTTP",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": request.method or "", "url.path": request.path},
    ) as span:
        trace_id = _hex(span.get_span_context().trace_id, 32)
        observe.current_trace.set(trace_id)
        response = get_response(request)
        match = request.resolver_match
        if match is not None and match.route:
            span.update_name(f"{request.method} {match.route}")
            span.set_attribute("http.route", match.route)
        span.set_attribute("http.response.status_code", response.status_code)
        return response, trace_id


def producer_spans(rows: Sequence[NewJob], explicit: Sequence[bool]) -> tuple[list[NewJob], list[Any]]:
    """A producer span per job, started now (ended by ``end``); jobs that did not name a
    trace of their own carry their span's traceparent."""
    from dataclasses import replace

    from opentelemetry.trace import SpanKind

    spans = []
    out = []
    for row, own in zip(rows, explicit, strict=True):
        span = _tracer.start_span(
            f"send {row.queue_name}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "enqueue",
                "messaging.destination.name": row.queue_name,
                "messaging.message.id": str(row.id),
                "jobs.task": row.task_path,
            },
        )
        spans.append(span)
        out.append(row if own else replace(row, trace_id=_traceparent(span)))
    return out, spans


def end(spans: Sequence[Any]) -> None:
    for span in spans:
        span.end()


@contextmanager
def attempt_span(row: Claimed) -> Iterator[None]:
    """The consumer span of one attempt: the child of the enqueue's span, linked to it."""
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags

    parsed = observe.parse_traceparent(row.trace_id) if len(row.trace_id) == 55 else None
    parent = None
    links = []
    if parsed is not None:
        trace_id, span_id, flags = parsed
        producer = SpanContext(
            int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16))
        )
        parent = trace.set_span_in_context(NonRecordingSpan(producer))
        links.append(Link(producer))
    with _tracer.start_as_current_span(
        f"process {row.queue_name}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": row.queue_name,
            "messaging.message.id": str(row.id),
            "jobs.task": row.task_path,
            "jobs.attempt": row.attempt,
        },
    ):
        yield
