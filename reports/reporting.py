"""Reports: the kinds there are, asking for one (deduplicated), building it, the weekly one.

A report is a job of ``reports.tasks.build_report`` owned by the person who asked. It
streams its rows from a server-side cursor into a CSV result file (jobs/files.py), so a
million rows cost the executor no more memory than ten; it reports progress as it goes.
Asking again for the same report (same person, kind and parameters) while one is
unfinished gives that one back (the engine's dedupe key), which the API answers with 409.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from jobs.csvfiles import csv_result_writer
from jobs.ownership import owner_key
from jobs.progress import JobContext

from .countries import HOW_TO_WRITE, country_code
from .exceptions import BadReportRequest, ReportNotAllowed, UnknownCountry
from .models import Customer

# Rows between two progress reports.
PROGRESS_EVERY = 1000


@dataclass(frozen=True)
class Kind:
    name: str
    label: str
    staff_only: bool
    clean: Callable[[dict[str, Any]], dict[str, Any]]


def _clean_customers(params: dict[str, Any]) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    unknown = set(params) - {"country"}
    for name in sorted(unknown):
        errors[f"params.{name}"] = ["unknown parameter"]
    country = ""
    try:
        country = country_code(params.get("country"))
    except UnknownCountry as exc:
        errors["params.country"] = [f"{exc} Enter {HOW_TO_WRITE}, or leave it empty for all countries."]
    if errors:
        raise BadReportRequest(errors)
    return {"country": country} if country else {}


def _clean_activity(params: dict[str, Any]) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    for name in sorted(set(params) - {"days"}):
        errors[f"params.{name}"] = ["unknown parameter"]
    days = params.get("days", 7)
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 366:
        errors["params.days"] = ["Days must be a whole number from 1 to 366."]
    if errors:
        raise BadReportRequest(errors)
    return {"days": days}


KINDS = {
    kind.name: kind
    for kind in (
        Kind("customers", "My imported customers", staff_only=False, clean=_clean_customers),
        Kind("job_activity", "Job activity per task and day", staff_only=True, clean=_clean_activity),
    )
}


def kinds_for(user: Any) -> list[Kind]:
    return [kind for kind in KINDS.values() if not kind.staff_only or user.is_staff]


def clean(*, kind: object, params: object, user: Any) -> tuple[str, dict[str, Any]]:
    """The kind and its normalized parameters; BadReportRequest or ReportNotAllowed."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise BadReportRequest({"kind": [f"must be one of: {', '.join(KINDS)}"]})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadReportRequest({"params": ["must be an object"]})
    if KINDS[kind].staff_only and not user.is_staff:
        raise ReportNotAllowed(f"the {kind} report is for staff only")
    return kind, KINDS[kind].clean(params)


@dataclass(frozen=True)
class Requested:
    job_id: str
    # True when the same report was already being made: job_id is that one.
    duplicate: bool = False


def request_report(*, user: Any, kind: object, params: object) -> Requested:
    """Enqueue a report for ``user``, or give back the unfinished identical one."""
    from .tasks import build_report

    kind, params = clean(kind=kind, params=params, user=user)
    owner = owner_key(user)
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:32]
    result = build_report.using(owner=owner, dedupe_key=f"report:{owner}:{kind}:{digest}").enqueue(
        kind, params, user.pk
    )
    return Requested(job_id=result.id, duplicate=result.deduplicated)


# --- building ------------------------------------------------------------------------------


def build(
    kind: str, params: dict[str, Any], *, user_id: int, job_id: str, context: JobContext
) -> dict[str, Any]:
    header, total, rows = _SOURCES[kind](params, user_id)
    stamp = timezone.localdate().isoformat()
    count, entry = write_csv(job_id, f"{kind.replace('_', '-')}-{stamp}.csv", header, rows, total, context)
    return {"file": entry, "rows": count, "kind": kind, "params": params}


def write_csv(
    job_id: str,
    filename: str,
    header: Sequence[str],
    rows: Iterator[Sequence[Any]],
    total: int | None,
    context: JobContext,
) -> tuple[int, dict[str, Any]]:
    """Stream ``rows`` into the job's CSV result file; returns (rows, the file's entry)."""
    count = 0
    context.set_progress(0, total, "starting")
    with csv_result_writer(job_id, filename) as (writer, out):
        writer.writerow(header)
        for row in rows:
            writer.writerow(row)
            count += 1
            if count % PROGRESS_EVERY == 0:
                # With a total the bar says how far; without one, the count does.
                context.set_progress(
                    min(count, total or count), total, "writing the CSV" if total else f"{count:,} rows"
                )
    context.set_progress(count, max(count, total or 0), "written")
    assert out.entry is not None
    return count, out.entry


def _customers(params: dict[str, Any], user_id: int) -> tuple[list[str], int, Iterator[Sequence[Any]]]:
    rows = Customer.objects.filter(owner_id=user_id)
    if params.get("country"):
        rows = rows.filter(country=params["country"])
    fields = ["name", "email", "phone", "country", "created_at", "updated_at"]
    # iterator(): a server-side cursor on PostgreSQL, chunk_size rows in memory at a time.
    return fields, rows.count(), rows.order_by("id").values_list(*fields).iterator(chunk_size=5000)


ACTIVITY_SQL = """
    SELECT task_path,
           (finished_at AT TIME ZONE %(tz)s)::date AS day,
           count(*) AS finished,
           count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE state = 'dead') AS failed,
           sum(greatest(attempt - 1, 0)) AS retries,
           round((percentile_cont(0.5) WITHIN GROUP (
               ORDER BY extract(epoch FROM finished_at - last_attempted_at)) * 1000)::numeric, 1) AS p50_ms,
           round((percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM finished_at - last_attempted_at)) * 1000)::numeric, 1) AS p95_ms
    FROM jobs_job
    WHERE state IN ('succeeded', 'dead') AND finished_at >= %(since)s
    GROUP BY 1, 2
    ORDER BY 2, 1
"""


def _activity(params: dict[str, Any], user_id: int) -> tuple[list[str], int | None, Iterator[Sequence[Any]]]:
    header = ["task", "day", "finished", "succeeded", "failed", "retries", "p50_ms", "p95_ms"]
    return header, None, _activity_rows(params["days"])


def _activity_rows(days: int) -> Iterator[Sequence[Any]]:
    since = timezone.now() - timedelta(days=days)
    # A named (server-side) cursor needs a transaction; it reads, so it holds no locks.
    with transaction.atomic(), connection.chunked_cursor() as cursor:
        cursor.execute(ACTIVITY_SQL, {"tz": settings.TIME_ZONE, "since": since})
        while batch := cursor.fetchmany(2000):
            yield from batch


_SOURCES: dict[
    str, Callable[[dict[str, Any], int], tuple[list[str], int | None, Iterator[Sequence[Any]]]]
] = {
    "customers": _customers,
    "job_activity": _activity,
}


# --- the weekly report -----------------------------------------------------------------------


def weekly(*, job_id: str, context: JobContext) -> dict[str, Any]:
    """Last week's job activity as this job's file, and one email per staff member (with an
    address) linking to it. Each email is a delivery record keyed by this job and the
    recipient, sent by its own job: a retry of this one sends nobody a second copy."""
    from notifications.email import delivery
    from notifications.email.tasks import send_email

    header, _, rows = _activity({"days": 7}, 0)
    today = timezone.localdate()
    count, entry = write_csv(
        job_id, f"job-activity-week-to-{today.isoformat()}.csv", header, rows, None, context
    )
    period = f"{(today - timedelta(days=7)).isoformat()} to {today.isoformat()}"
    link = f"{settings.SITE_URL}{reverse('reports:reports')}?job={job_id}"
    sent = 0
    staff = get_user_model().objects.filter(is_staff=True, is_active=True).exclude(email="").order_by("pk")
    for user in staff:
        with transaction.atomic():
            record = delivery.prepare(
                message_key=f"weekly_report:{job_id}:{user.pk}",
                purpose="weekly_report",
                template="weekly_report",
                to=user.email,
                user=user,
                variables={"username": user.get_username(), "link": link, "period": period, "rows": count},
            )
            if record.job_id is None:
                result = send_email.using(dedupe_key=f"weekly-report:{job_id}:{user.pk}").enqueue(record.pk)
                record.job_id = result.id
                record.save(update_fields=["job_id"])
                sent += 1
    return {"file": entry, "rows": count, "kind": "job_activity", "params": {"days": 7}, "emails": sent}
