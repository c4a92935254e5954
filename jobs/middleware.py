"""The web side of observability, first in settings.MIDDLEWARE.

Each request runs in a trace: its W3C ``traceparent``'s, else its ``X-Request-ID``, else
a new one (jobs.observe). The trace id goes back in the ``X-Request-ID`` response header,
into every log line of the request (jobs.logs) and onto every job the request enqueues,
so the request can be followed into its jobs. With OpenTelemetry on (jobs.otel) the
request is a server span, the parent of the enqueues' producer spans.

Requests are counted by method, view (its URL name: bounded) and status (jobs.metrics).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from . import metrics, observe, otel

KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ObserveMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        # Jobs enqueued by this process's requests are counted for its /metrics.
        observe.set_enqueued_sink(metrics.count_enqueued)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        traceparent = request.META.get("HTTP_TRACEPARENT")
        trace_id = observe.trace_from_headers(traceparent, request.META.get("HTTP_X_REQUEST_ID"))
        token = observe.current_trace.set(trace_id)
        try:
            if otel.enabled():
                response, trace_id = otel.request_span(request, traceparent, self.get_response)
            else:
                response = self.get_response(request)
        finally:
            observe.current_trace.reset(token)
        response["X-Request-ID"] = trace_id
        match = request.resolver_match
        view = (match.view_name or "other") if match is not None else "unmatched"
        method = request.method if request.method in KNOWN_METHODS else "other"
        metrics.count_request(method, view, response.status_code, time.perf_counter() - started)
        return response
