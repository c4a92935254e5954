"""The operations console. Job rows are read-only here; every action goes through jobs.store,
needs its own permission (jobs.Job's Meta) and is written to Django's admin log.

The list at a million rows is jobs/console/changelist.py (filters, search, counts without
COUNT); the dashboard is dashboard.py; the actions are actions.py (all in jobs/console/).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.expressions import RawSQL
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from .. import selectors
from ..models import FINISHED_STATES, FireRecord, Job, PausedQueue, Schedule, Worker
from ..progress import view as progress_view
from ..states import State
from . import changelist, history
from . import limits as limit_admin  # noqa: F401 - registers the limit pages
from .actions import CANCELLABLE, REPLAYABLE, JobActions
from .dashboard import running_on
from .moments import moment_column, moment_html
from .names import admin_url_name

# What the list loads: never the payload, result or tracebacks.
_LIST_COLUMNS = (
    "id", "task_path", "queue_name", "state", "attempt", "max_attempts", "run_at", "created_at",
    "last_attempted_at", "finished_at", "last_error", "limit_name", "limit_wait", "progress",
    "cancel_requested_at",
)  # fmt: skip


def _progress_text(job: Job) -> str:
    """What the handler last reported (jobs/progress.py): "1,200 of 5,000 (24 %) · message"."""
    shown = progress_view(job.progress)
    if shown is None:
        return ""
    text = f"{shown['done']:,}" + (f" of {shown['total']:,}" if shown["total"] is not None else "")
    if shown["percent"] is not None:
        text += f" ({shown['percent']} %)"
    return f"{text} · {shown['message']}" if shown["message"] else text


@admin.register(Job)
class JobAdmin(JobActions, admin.ModelAdmin):
    list_display = (
        "short_id",
        "task",
        "console_state",
        "error",
        "ran_or_runs_at",
    )
    list_display_links = ("short_id",)
    list_filter = (
        changelist.StateFilter,
        changelist.QueueFilter,
        changelist.TaskFilter,
        changelist.CreatedFilter,
    )
    search_fields = ("id",)  # the search box; jobs.console.changelist.search does the searching
    search_help_text = "Job id, trace id, dedupe key, or text of the last error (3+ characters)."
    ordering = ("-id",)
    list_per_page = 50
    # "Show all" would load every row the (estimated) count hides.
    list_max_show_all = 0
    show_full_result_count = False
    actions = ("replay_jobs", "cancel_jobs", "run_jobs_now", "discard_jobs")
    # Named, not found by Django's admin/<app_label>/<model>/ lookup: the engine's templates
    # serve a project that installs the engine under another label too.
    change_form_template = "admin/jobs/job/change_form.html"
    change_list_template = "admin/jobs/job/change_list.html"
    fieldsets = (
        (None, {"fields": ("job", "state_shown", "links")}),
        ("Attempts", {"fields": ("attempt_history", "payload_history")}),
        ("Timing and lease", {"fields": ("timing",)}),
        ("Payload and result", {"fields": ("args_pretty", "kwargs_pretty", "result_pretty")}),
    )
    readonly_fields = (
        "job", "state_shown", "links", "attempt_history", "payload_history", "timing",
        "args_pretty", "kwargs_pretty", "result_pretty",
    )  # fmt: skip

    # --- permissions -------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # Only finished jobs may be discarded: an unfinished one is cancelled instead.
        if obj is not None and obj.state not in FINISHED_STATES:
            return False
        return super().has_delete_permission(request, obj)

    def _may(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "replay_job")

    def has_edit_replay_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "edit_replay_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "cancel_job")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "run_job_now")

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "pause_queue")

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes where the actions show (an ActionLocation, which 6.0 does not have);
        # passed on only when given, so the console runs on both.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)
        # Django's own deletes unfinished jobs too and lists every row first.
        actions.pop("delete_selected", None)
        return actions

    # --- the list ----------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == f"{self.opts.app_label}_{self.opts.model_name}_changelist":
            queryset = queryset.only(*_LIST_COLUMNS).annotate(
                last_exception=RawSQL("errors -> -1 ->> 'exception'", []),
                queue_paused=Exists(PausedQueue.objects.filter(name=OuterRef("queue_name"))),
            )
        return queryset

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        return changelist.search(queryset, search_term), False

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> changelist.EstimatedPaginator:
        total, exact = changelist.estimated_count(request, queryset)
        request.jobs_count_exact = exact  # type: ignore[attr-defined]
        return changelist.EstimatedPaginator(queryset, per_page, total=total, exact=exact)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        response = super().changelist_view(request, extra_context)
        if hasattr(response, "context_data"):
            response.context_data["count_exact"] = getattr(request, "jobs_count_exact", True)
        return response

    @admin.display(description="id · created", ordering="id")
    def short_id(self, job: Job) -> str:
        # Ids are time-ordered (jobs.ids): the creation time belongs beside the id.
        created = moment_html(job.created_at)
        return format_html("<code title='{}'>{}</code><small>{}</small>", job.id, job.id.hex[-8:], created)

    @admin.display(description="task · queue", ordering="task_path")
    def task(self, job: Job) -> str:
        # Breaks after the dots and underscores of a long path rather than inside a word.
        path = format_html_join(
            mark_safe(".<wbr>"), "{}",
            ((format_html_join(mark_safe("_<wbr>"), "{}", ((word,) for word in part.split("_"))),)
             for part in job.task_path.split(".")),
        )  # fmt: skip
        paused = " (paused)" if getattr(job, "queue_paused", False) else ""
        return format_html(
            "<span class='job-task' title='{}'>{}</span><small class='job-queue'>{}{}</small>",
            job.task_path, path, job.queue_name, paused,
        )  # fmt: skip

    @admin.display(description="state")
    def console_state(self, job: Job) -> str:
        shown = changelist.console_state(job)
        progress = _progress_text(job) if job.state == State.RUNNING else ""
        tries = f"try {job.attempt} of {job.max_attempts}" if job.attempt else ""
        return format_html(
            "<span class='job-state job-state-{}'>{}</span>{}{}",
            job.state, shown, format_html("<small>{}</small>", tries) if tries else "",
            format_html("<small>{}</small>", progress) if progress else "",
        )  # fmt: skip

    @admin.display(description="last error")
    def error(self, job: Job) -> str:
        if not job.last_error:
            return "-"
        first_line = job.last_error.strip().splitlines()[0] if job.last_error.strip() else ""
        cls = changelist.error_class(getattr(job, "last_exception", None) or "")
        return format_html(
            "<span class='job-error' title='{}'><strong>{}</strong> {}</span>",
            job.last_error[:500],
            cls,
            Truncator(first_line).chars(90),
        )

    @admin.display(description="run at / finished · took")
    def ran_or_runs_at(self, job: Job) -> str:
        took = self._took(job)
        return format_html(
            "{}{}",
            moment_html(job.finished_at or job.run_at),
            format_html("<small>took {}</small>", took) if took != "-" else "",
        )

    def _took(self, job: Job) -> str:
        if job.last_attempted_at is None:
            return "-"
        if job.state == State.RUNNING:
            return changelist.seconds(timezone.now() - job.last_attempted_at) + "…"
        if job.finished_at is None:
            return "-"
        return changelist.seconds(job.finished_at - job.last_attempted_at)

    # --- the detail page ---------------------------------------------------------------

    @admin.display(description="state")
    def state_shown(self, job: Job) -> str:
        shown = changelist.console_state(job)
        limit = f" (limit key {job.limit_key!r})" if job.limit_wait and job.limit_key else ""
        progress = _progress_text(job)
        runs = history.run_label(job, history.history(job, worker_name=lambda token: ""))
        return format_html(
            "<span class='job-state job-state-{}'>{}</span>{} · {}{}",
            job.state, shown, limit, runs, f" · progress {progress}" if progress else "",
        )  # fmt: skip

    @admin.display(description="job")
    def job(self, job: Job) -> str:
        rows = [
            ("id", str(job.id)), ("task", job.task_path), ("queue", job.queue_name),
            ("priority", str(job.priority)), ("trace id", job.trace_id or "-"),
            ("dedupe key", job.dedupe_key or "-"),
            ("limit", f"{job.limit_name} key {job.limit_key or '-'}" if job.limit_name else "-"),
        ]  # fmt: skip
        return _table(rows)

    @admin.display(description="times")
    def timing(self, job: Job) -> str:
        rows = [
            ("created", changelist.moment(job.created_at)), ("run at", changelist.moment(job.run_at)),
            ("first started", changelist.moment(job.started_at)),
            ("last attempt began", changelist.moment(job.last_attempted_at)),
            ("finished", changelist.moment(job.finished_at)),
            ("not started after", changelist.moment(job.expires_at)),
            ("lease until", changelist.moment(job.lease_expires_at)), ("held by", self.owner_worker(job)),
            ("time limit", f"{job.timeout:g} s" if job.timeout else "worker default"),
            ("lease", f"{job.lease_seconds:g} s" if job.lease_seconds else "worker default"),
        ]  # fmt: skip
        return _table(rows)

    @admin.display(description="worker")
    def owner_worker(self, job: Job) -> str:
        if job.worker_id is None:
            return "-"
        worker = Worker.objects.filter(slot_tokens__contains=[job.worker_id]).first()
        live = job.lease_expires_at is not None and job.lease_expires_at > timezone.now()
        lease = "lease live" if live else "lease ran out"
        if worker is None:
            return f"claim token {job.worker_id} (worker gone; {lease})"
        return f"{worker.hostname} pid {worker.pid} ({lease})"

    @admin.display(description="links")
    def links(self, job: Job) -> str:
        found = _links(job)
        if not found:
            return "-"
        return format_html_join(" · ", "<a href='{}'>{}</a>", found)

    @admin.display(description="runs")
    def attempt_history(self, job: Job) -> str:
        found = history.history(job, worker_name=_worker_name)
        if not found.entries:
            return "-"
        return render_to_string("admin/jobs/job/attempts.html", {"history": found})

    @admin.display(description="payload edits")
    def payload_history(self, job: Job) -> str:
        # Replays that kept the payload are in the runs table only.
        edits = [e for e in job.edits if "args" in e or "kwargs" in e]
        if not edits:
            return "-"
        return format_html_join(
            "",
            "<div class='edit'><p>Replaced at {} by {}:</p><pre>args = {}\nkwargs = {}</pre></div>",
            (
                (history.iso_moment(e.get("at")), e.get("by") or "?",
                 changelist.pretty_json(e.get("args")), changelist.pretty_json(e.get("kwargs")))
                for e in edits
            ),
        )  # fmt: skip

    @admin.display(description="args")
    def args_pretty(self, job: Job) -> str:
        return format_html("<pre class='payload'>{}</pre>", changelist.pretty_json(job.args))

    @admin.display(description="kwargs")
    def kwargs_pretty(self, job: Job) -> str:
        return format_html("<pre class='payload'>{}</pre>", changelist.pretty_json(job.kwargs))

    @admin.display(description="result")
    def result_pretty(self, job: Job) -> str:
        if job.state != State.SUCCEEDED:
            return "-"
        return format_html("<pre class='payload'>{}</pre>", changelist.pretty_json(job.result))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        job = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if job is not None:
            extra["job_buttons"] = self._buttons(request, job)
        return super().change_view(request, object_id, form_url, extra)

    def _buttons(self, request: HttpRequest, job: Job) -> list[dict[str, str]]:
        buttons = []
        live = job.lease_expires_at is not None and job.lease_expires_at > timezone.now()
        if job.state in REPLAYABLE and self.has_replay_permission(request) and not live:
            buttons.append({"name": "replay", "label": "Replay"})
        if job.state in CANCELLABLE and self.has_cancel_permission(request):
            buttons.append(
                {"name": "cancel", "label": "Cancel" if job.state != State.RUNNING else "Cancel (running)"}
            )
        if job.state in (State.SCHEDULED, State.QUEUED) and self.has_run_now_permission(request):
            buttons.append({"name": "run-now", "label": "Run now"})
        if job.state == State.DEAD and self.has_edit_replay_permission(request) and not live:
            buttons.append({"name": "edit-replay", "label": "Edit arguments and replay", "get": "1"})
        return buttons


def _table(rows: list[tuple[str, str]]) -> str:
    return format_html(
        "<table class='job-facts'>{}</table>", format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
    )


def _links(job: Job) -> list[tuple[str, str]]:
    """Where else this job appears: the schedule that fired it, and any record of another
    app that names it in a ``job_id`` column (email and push deliveries, workflow nodes)."""
    found: list[tuple[str, str]] = []
    fire = FireRecord.objects.filter(job_id=job.id).select_related("schedule").first()
    if fire is not None:
        found.append(
            (
                reverse(admin_url_name(Schedule._meta, "change"), args=[fire.schedule_id]),
                f"schedule {fire.schedule.name}",
            )
        )
    for model in admin.site._registry:
        if model is Job or model is FireRecord:
            continue
        if "job_id" not in {f.name for f in model._meta.get_fields()}:
            continue
        if model._default_manager.filter(job_id=job.id).exists():
            url = reverse(admin_url_name(model._meta, "changelist"))
            found.append((f"{url}?job_id={job.id}", str(model._meta.verbose_name_plural)))
    return found


def _worker_name(token: str | None) -> str:
    if not token:
        return "-"
    worker = Worker.objects.filter(slot_tokens__contains=[token]).first()
    return f"{worker.hostname}:{worker.pid}" if worker else f"token {str(token)[:8]}"


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = (
        "hostname",
        "pid",
        "queues_shown",
        "running",
        "started",
        "last_heartbeat",
    )
    started = moment_column("started_at", "started")
    last_heartbeat = moment_column("last_heartbeat_at", "last heartbeat")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    @admin.display(description="running")
    def running(self, worker: Worker) -> str:
        return running_on(worker.jobs_in_hand, worker.concurrency)

    @admin.display(description="queues")
    def queues_shown(self, worker: Worker) -> str:
        paused = selectors.paused_queues()
        parts = [p.split(":")[0] for p in worker.queues.split(",") if p]
        return ", ".join(f"{name} (paused)" if name in paused else name for name in parts)
