"""The operations console. Job rows are read-only here; every action goes through jobs.store,
needs its own permission (jobs.Job's Meta) and is written to Django's admin log.

This module declares the job and worker pages and draws the job list's columns. The list
at a million rows is jobs/console/changelist.py (filters, search, counts without COUNT); a
job's own page is detail.py; the dashboard is dashboard.py; the actions are actions.py
(all in jobs/console/).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.expressions import RawSQL
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from .. import selectors
from ..models import FINISHED_STATES, Job, PausedQueue, Worker
from ..states import State
from . import changelist
from . import limits as limit_admin  # noqa: F401 - registers the limit pages
from .actions import JobActions
from .dashboard import running_on
from .detail import JobDetail
from .moments import moment_column, moment_html

# What the list loads: never the payload, result or tracebacks.
_LIST_COLUMNS = (
    "id", "task_path", "queue_name", "state", "attempt", "max_attempts", "run_at", "created_at",
    "last_attempted_at", "finished_at", "last_error", "limit_name", "limit_wait", "progress",
    "cancel_requested_at",
)  # fmt: skip


@admin.register(Job)
class JobAdmin(JobActions, JobDetail, admin.ModelAdmin):
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
        progress = changelist.progress_text(job) if job.state == State.RUNNING else ""
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
