"""The console's dashboard (``/admin/jobs/job/dashboard/``): per-queue counts, throughput and
failures over the last hour and day, live workers, the tasks failing most. It reads only
jobs.stats' aggregates and the worker registry, so it costs the same with a million jobs,
and it refreshes itself: the page fetches its own body again every few seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_safe

from .. import stats
from ..conf import WORKER_EXPIRE_AFTER_SECONDS as EXPIRE_AFTER_SECONDS
from ..models import Job, Worker
from . import changelist
from .names import admin_url_name

REFRESH_SECONDS = 5


@require_safe  # a page to read: its buttons post to the job admin's own routes
def view(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(f"{Job._meta.app_label}.view_job"):
        raise PermissionDenied
    context = {
        **admin.site.each_context(request),
        "title": "Jobs dashboard",
        "opts": Job._meta,
        "refresh_ms": REFRESH_SECONDS * 1000,
        "may_pause": request.user.has_perm(f"{Job._meta.app_label}.pause_queue"),
        **snapshot(),
    }
    template = (
        "admin/jobs/dashboard_body.html" if request.GET.get("part") == "body" else "admin/jobs/dashboard.html"
    )
    return TemplateResponse(request, template, context)


def snapshot(*, now: datetime | None = None) -> dict[str, Any]:
    """Everything the dashboard shows, from the aggregates."""
    current = stats.queue_stats(now=now)
    list_url = reverse(admin_url_name(Job._meta, "changelist"))
    queues = [
        {
            "name": name,
            **values,
            "age": changelist.seconds(timedelta(seconds=values["oldest_due_age_s"]))
            if values["oldest_due_age_s"] is not None
            else "-",
            "list_url": f"{list_url}?{urlencode({'queue': name})}",
            "dead_url": f"{list_url}?{urlencode({'queue': name, 'state': 'dead'})}",
        }
        for name, values in current["queues"].items()
    ]
    hour = stats.throughput(since=timedelta(hours=1), step_minutes=1, now=now)
    day = stats.throughput(since=timedelta(days=1), step_minutes=15, now=now)
    failing = [
        {**row, "url": f"{list_url}?{urlencode({'task': row['task'], 'state': 'dead'})}"}
        for row in stats.top_failing(since=timedelta(hours=1), now=now)
    ]
    cutoff = (now or timezone.now()) - timedelta(seconds=EXPIRE_AFTER_SECONDS)
    workers = list(Worker.objects.filter(last_heartbeat_at__gte=cutoff).order_by("hostname", "pid"))
    moment = now or timezone.now()
    return {
        "queues": queues,
        "workers": [
            {
                "name": f"{w.hostname}:{w.pid}",
                "queues": ", ".join(part.split(":")[0] for part in w.queues.split(",") if part),
                "running": running_on(w.jobs_in_hand, w.concurrency),
                "heartbeat": changelist.seconds(moment - w.last_heartbeat_at) + " ago",
                "started": changelist.moment(w.started_at, now=moment),
            }
            for w in workers
        ],
        "failing": failing,
        "hour_chart": chart(hour, label="per minute"),
        "day_chart": chart(day, label="per 15 minutes"),
        "hour_totals": (sum(ok for _, ok, _ in hour), sum(bad for _, _, bad in hour)),
        "day_totals": (sum(ok for _, ok, _ in day), sum(bad for _, _, bad in day)),
        "now": changelist.moment(moment, now=moment),
    }


def running_on(jobs: int, processes: int) -> str:
    """A worker's load in words: "3 jobs on 2 processes". ``--concurrency`` counts executor
    processes, and each may run several jobs at once (threads, async handlers), so more
    jobs than processes is normal, not an overload."""
    return f"{jobs} job{'s' if jobs != 1 else ''} on {processes} process{'es' if processes != 1 else ''}"


def chart(
    series: list[tuple[datetime, int, int]], *, label: str, width: int = 560, height: int = 90
) -> SafeString:
    """Succeeded (green) and failed (red) stacked bars as inline SVG, one per slot."""
    if not series:
        return format_html("<p>-</p>")
    top = max((ok + bad for _, ok, bad in series), default=0) or 1
    bar = width / len(series)
    bars = []
    for index, (slot, ok, bad) in enumerate(series):
        x = index * bar
        ok_h = height * ok / top
        bad_h = height * bad / top
        tip = f"{timezone.localtime(slot):%H:%M}: {ok} succeeded, {bad} failed"
        bars.append((f"{x:.1f}", f"{height - ok_h:.1f}", f"{max(bar - 1, 1):.1f}", f"{ok_h:.1f}",
                     f"{height - ok_h - bad_h:.1f}", f"{bad_h:.1f}", tip))  # fmt: skip
    body = format_html_join(
        "",
        "<g><title>{6}</title><rect x='{0}' y='{1}' width='{2}' height='{3}' class='ok'/>"
        "<rect x='{0}' y='{4}' width='{2}' height='{5}' class='bad'/></g>",
        bars,
    )
    return format_html(
        # Scaled to its column (the viewBox stretches); the label is HTML, so it keeps its size.
        "<p class='axis'>max {} {}</p><svg class='chart' viewBox='0 0 {} {}' preserveAspectRatio='none' "
        "width='100%' height='{}' role='img' aria-label='{}'>{}</svg>",
        top, label, width, height, height, f"jobs {label}", body,
    )  # fmt: skip
