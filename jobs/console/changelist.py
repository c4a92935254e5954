"""The console's job list at a million rows: filters that name states as operators think of
them, served by indexes (migration 0011_console); a paginator that never counts rows
(it takes the counts from jobs.stats, or the planner's estimate, and says so); a search by
id, trace id, dedupe key and error text; and the small formatting the pages share.

Ordering is by id, newest first: ids are time-ordered (jobs.ids), so the primary key
serves the unfiltered list, time ranges and the queue and task filters; finished states
have their (state, id) index, unfinished ones the engine's partial indexes.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.http import HttpRequest
from django.utils import timezone

from .. import selectors, stats
from ..ids import id_bound
from ..models import Job
from ..progress import view as progress_view
from ..states import State
from .moments import moment as moment

# The console's states: what each means as a filter on the job table.
CONSOLE_STATES: dict[str, tuple[str, Q]] = {
    "queued": ("Queued (due now)", Q(state=State.QUEUED, attempt=0)),
    "scheduled": ("Scheduled (future run time)", Q(state=State.SCHEDULED, attempt=0)),
    "retrying": (
        "Retrying (after a failed attempt)",
        Q(state__in=[State.QUEUED, State.SCHEDULED], attempt__gt=0),
    ),
    "running": ("Running", Q(state=State.RUNNING)),
    "succeeded": ("Succeeded", Q(state=State.SUCCEEDED)),
    "dead": ("Dead", Q(state=State.DEAD)),
    "cancelled": ("Cancelled", Q(state=State.CANCELLED)),
    "expired": ("Expired", Q(state=State.EXPIRED)),
}
RANGES = {
    "15m": ("Last 15 minutes", timedelta(minutes=15)),
    "1h": ("Last hour", timedelta(hours=1)),
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
}
# Parameters that leave the counts to jobs.stats (exact) rather than to the planner.
_COUNTED = {"state", "queue"}
_PAGING = {"p", "o", "_changelist_filters", "all"}
_HEX_ID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


def console_state(job: Job) -> str:
    """The state as the console names it: retrying, waiting on a limit, a cancel pending
    (asked while the job runs: it ends when its attempt does), or the state."""
    retrying = job.state in (State.QUEUED, State.SCHEDULED) and job.attempt > 0
    named = "retrying" if retrying else str(job.state)
    if job.state == State.RUNNING and job.cancel_requested_at is not None:
        return "running, cancel pending"
    if job.state == State.SCHEDULED and job.limit_wait and job.limit_name:
        return f"waiting on limit {job.limit_name} ({job.limit_wait})"
    return named


def progress_text(job: Job) -> str:
    """What the handler last reported (jobs/progress.py): "1,200 of 5,000 (24 %) · message"."""
    shown = progress_view(job.progress)
    if shown is None:
        return ""
    text = f"{shown['done']:,}" + (f" of {shown['total']:,}" if shown["total"] is not None else "")
    if shown["percent"] is not None:
        text += f" ({shown['percent']} %)"
    return f"{text} · {shown['message']}" if shown["message"] else text


def seconds(value: timedelta | None) -> str:
    if value is None:
        return "-"
    total = value.total_seconds()
    if total < 1:
        return f"{total * 1000:.0f} ms"
    if total < 120:
        return f"{total:.1f} s"
    if total < 7200:
        return f"{total / 60:.1f} min"
    return f"{total / 3600:.1f} h"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def error_class(path: str) -> str:
    return path.rsplit(".", 1)[-1] if path else ""


# --- filters ---------------------------------------------------------------------------


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in CONSOLE_STATES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        chosen = CONSOLE_STATES.get(self.value() or "")
        return queryset.filter(chosen[1]) if chosen else queryset


class QueueFilter(admin.SimpleListFilter):
    """Queues from jobs.stats (the aggregates), not a DISTINCT over the job table."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = set(stats.counts())
        paused = selectors.paused_queues()
        return [(name, f"{name} (paused)" if name in paused else name) for name in sorted(names | paused)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(queue_name=self.value()) if self.value() else queryset


class TaskFilter(admin.SimpleListFilter):
    """Tasks that ran in the last day, from the aggregates; any other by ?task=PATH."""

    title = "task"
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        paths = selectors.recent_task_paths()
        chosen = request.GET.get(self.parameter_name)
        # A filter without choices is not applied at all: keep the one asked for.
        if chosen and chosen not in paths:
            paths.append(chosen)
        return [(path, path) for path in paths]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(task_path=self.value()) if self.value() else queryset


class CreatedFilter(admin.SimpleListFilter):
    """Created within a recent window: a range of the primary key (ids are time-ordered)."""

    title = "created"
    parameter_name = "created"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in RANGES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        chosen = RANGES.get(self.value() or "")
        if chosen is None:
            return queryset
        return queryset.filter(id__gte=id_bound(timezone.now() - chosen[1]))


# --- search ----------------------------------------------------------------------------


def search(queryset: QuerySet[Job], term: str) -> QuerySet[Job]:
    """Jobs whose id, trace id or dedupe key is ``term``, or whose last error contains it
    (three characters or more: the trigram index needs them). Each branch is written as
    its index's condition says, so PostgreSQL ORs the indexes' bitmaps."""
    term = term.strip()
    if not term:
        return queryset
    clauses = [
        "(dedupe_key = %s AND dedupe_key IS NOT NULL)",
        "(trace_id = %s AND trace_id <> '' AND trace_id <> encode(uuid_send(id), 'hex'))",
    ]
    params: list[Any] = [term, term]
    if _HEX_ID.match(term):
        # A job's default trace id is its own id (as hex): the primary key finds both.
        clauses.append("id = %s")
        params.append(uuid.UUID(term))
    if len(term) >= 3:
        clauses.append("(last_error ILIKE %s AND last_error <> '')")
        params.append("%" + re.sub(r"([\\%_])", r"\\\1", term) + "%")
    # The clauses are constants; the term only ever travels as a parameter.
    return queryset.filter(RawSQL(" OR ".join(clauses), params, output_field=BooleanField()))  # noqa: S611


# --- counting without COUNT(*) --------------------------------------------------------


def estimated_count(request: HttpRequest, queryset: QuerySet[Job]) -> tuple[int, bool]:
    """(rows, exact): from the aggregates when only state and queue filter the list (exact,
    as of this transaction), else the planner's estimate for the query."""
    keys = set(request.GET) - _PAGING
    if keys <= _COUNTED:
        per_queue = stats.counts()
        queue = request.GET.get("queue")
        state = request.GET.get("state")
        if state is not None and state not in CONSOLE_STATES:
            state = None
        total = 0
        for name, buckets in per_queue.items():
            if queue and name != queue:
                continue
            total += buckets.get(state, 0) if state else sum(buckets.values())
        return total, True
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"]), False


class EstimatedPaginator(Paginator):
    """Pages of a fixed size whose total is given, not counted: a page is always a full
    slice (the estimate may be low), and any page number from 1 is valid."""

    def __init__(self, object_list: Any, per_page: int, *, total: int, exact: bool) -> None:
        super().__init__(object_list, per_page)
        self.total = total
        self.exact = exact

    @cached_property
    def count(self) -> int:
        return self.total

    def validate_number(self, number: Any) -> int:
        try:
            value = int(number)
        except (TypeError, ValueError):
            value = 1
        return max(value, 1)

    def page(self, number: Any) -> Any:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        return self._get_page(self.object_list[bottom : bottom + self.per_page], number, self)  # type: ignore[attr-defined]
