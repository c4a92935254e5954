"""The web app's Prometheus ``/metrics``: queue gauges read from the job table at scrape
time, and the app's own request and enqueue counters. Each ``runworker`` serves its own
(jobs/worker/metrics.py).

Not public: the endpoint needs ``Authorization: Bearer $METRICS_TOKEN``; it answers 404
while the setting is empty and 401 to a missing or wrong token.

Under gunicorn each web process counts its own requests: with ``PROMETHEUS_MULTIPROC_DIR``
set (scripts/run sets it, config/gunicorn.py marks dead processes' files), prometheus-client
writes them to files there and a scrape sums every process's.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .conf import backend_queues

PREFIX = "jobs_"
# Waiting states the gauges count per queue (and "dead": the dead-letter state).
GAUGE_STATES = ("queued", "scheduled", "retrying", "running", "dead")

REGISTRY = CollectorRegistry(auto_describe=True)
REQUESTS = Counter(
    f"{PREFIX}http_requests",
    "Web requests answered, by method, view and status code.",
    ["method", "view", "status"],
    registry=REGISTRY,
)
REQUEST_DURATION = Histogram(
    f"{PREFIX}http_request_duration_seconds",
    "Time to answer a web request, by method and view.",
    ["method", "view"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
ENQUEUED = Counter(f"{PREFIX}enqueued", "Jobs enqueued, by task.", ["task"], registry=REGISTRY)


def queue_gauges() -> list[dict[str, Any]]:
    """Per queue: queued, scheduled, retrying (scheduled after a failed attempt), running,
    dead, oldest_due_age_s (of the queued jobs; 0 when none) and paused, from the console's
    aggregates (jobs.stats.queue_stats: no job row is counted at scrape time). Every
    configured queue is listed, with zeros when it is empty."""
    from .stats import queue_stats

    configured = backend_queues() or ["default"]
    stats: dict[str, dict[str, Any]] = {name: _empty(name) for name in configured}
    for queue, values in queue_stats()["queues"].items():
        entry = stats.setdefault(queue, _empty(queue))
        entry.update({state: values[state] for state in GAUGE_STATES})
        entry["oldest_due_age_s"] = max(float(values["oldest_due_age_s"] or 0.0), 0.0)
        entry["paused"] = bool(values["paused"])
    return [stats[name] for name in sorted(stats)]


def _empty(queue: str) -> dict[str, Any]:
    return {"queue": queue, **dict.fromkeys(GAUGE_STATES, 0), "oldest_due_age_s": 0.0, "paused": False}


class QueueCollector:
    """The queue gauges, read when Prometheus scrapes."""

    def collect(self) -> Iterator[Any]:
        from .selectors import workers_alive

        stats = queue_gauges()
        family = GaugeMetricFamily(
            f"{PREFIX}queue_jobs", "Jobs per queue and state.", labels=["queue", "state"]
        )
        for entry in stats:
            for state in GAUGE_STATES:
                family.add_metric([entry["queue"], state], entry[state])
        yield family
        family = GaugeMetricFamily(
            f"{PREFIX}queue_oldest_due_age_seconds",
            "How long the oldest due job of a queue has waited (0: none waiting).",
            labels=["queue"],
        )
        for entry in stats:
            family.add_metric([entry["queue"]], entry["oldest_due_age_s"])
        yield family
        family = GaugeMetricFamily(f"{PREFIX}queue_paused", "1 if the queue is paused.", labels=["queue"])
        for entry in stats:
            family.add_metric([entry["queue"]], 1 if entry["paused"] else 0)
        yield family
        yield GaugeMetricFamily(
            f"{PREFIX}workers_alive", "runworker processes with a fresh registry row.", value=workers_alive()
        )


def exposition() -> bytes:
    """The text exposition: queue gauges, then this app's counters (every web process's
    when PROMETHEUS_MULTIPROC_DIR is set)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client.multiprocess import MultiProcessCollector

        MultiProcessCollector(registry)
    else:
        registry.register(_Own())
    return generate_latest(registry)


class _Own:
    def collect(self) -> Iterator[Any]:
        yield from REGISTRY.collect()


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = getattr(settings, "METRICS_TOKEN", "")
    if not token:
        return HttpResponse("Not Found", status=404, content_type="text/plain")
    scheme, _, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), token.encode()):
        response = HttpResponse("Unauthorized", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


def count_enqueued(task_path: str, n: int) -> None:
    ENQUEUED.labels(task_path).inc(n)


def count_request(method: str, view: str, status: int, seconds: float) -> None:
    REQUESTS.labels(method, view, str(status)).inc()
    REQUEST_DURATION.labels(method, view).observe(seconds)
