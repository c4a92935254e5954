"""The operations console. Job rows are read-only here; every action goes through jobs.store."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from . import store
from .exceptions import JobsError
from .models import Job, Worker
from .progress import view as progress_view


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "task_path",
        "queue_name",
        "state",
        "progress_shown",
        "attempt",
        "max_attempts",
        "run_at",
        "created_at",
    )
    list_filter = ("state", "queue_name")
    search_fields = ("=id", "task_path", "dedupe_key", "trace_id")
    ordering = ("-created_at",)
    show_full_result_count = False
    actions = ("replay_jobs", "cancel_jobs", "run_jobs_now")
    fieldsets = (
        (None, {"fields": ("id", "task_path", "queue_name", "priority", "state", "trace_id", "dedupe_key")}),
        (
            "Attempts",
            {"fields": ("attempt", "max_attempts", "progress_shown", "last_error", "attempt_history")},
        ),
        (
            "Timing",
            {
                "fields": (
                    "created_at",
                    "run_at",
                    "started_at",
                    "last_attempted_at",
                    "finished_at",
                    "lease_expires_at",
                    "worker_id",
                    "timeout",
                    "lease_seconds",
                )
            },
        ),
        ("Payload and result", {"fields": ("args", "kwargs", "result")}),
    )
    readonly_fields = ("attempt_history", "progress_shown")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    @admin.display(description="Progress")
    def progress_shown(self, job: Job) -> str:
        """What the handler last reported (jobs/progress.py): "1,200 of 5,000 (24 %) · message"."""
        shown = progress_view(job.progress)
        if shown is None:
            return "-"
        text = f"{shown['done']:,}" + (f" of {shown['total']:,}" if shown["total"] is not None else "")
        if shown["percent"] is not None:
            text += f" ({shown['percent']} %)"
        return f"{text} · {shown['message']}" if shown["message"] else text

    @admin.display(description="Attempt history")
    def attempt_history(self, job: Job) -> str:
        if not job.errors:
            return "-"
        return format_html_join(
            "",
            "<div class='attempt'><p><strong>Attempt {}</strong> at {} on worker {}: {} &mdash; {}</p>"
            "<pre>{}</pre></div>",
            (
                (
                    error.get("attempt", "?"),
                    error.get("at", "?"),
                    error.get("worker", "?"),
                    error.get("exception", ""),
                    error.get("message", ""),
                    error.get("traceback", ""),
                )
                for error in job.errors
            ),
        ) or format_html("-")

    def _apply(self, request: HttpRequest, queryset: QuerySet[Job], action: str, verb: str) -> None:
        done, refused = 0, []
        for job_id in queryset.values_list("id", flat=True):
            try:
                getattr(store, action)(job_id)
                done += 1
            except JobsError as exc:
                refused.append(str(exc))
        if done:
            self.message_user(request, f"{verb} {done} job(s).", messages.SUCCESS)
        for reason in refused[:10]:
            self.message_user(request, reason, messages.WARNING)

    @admin.action(description="Replay selected dead or cancelled jobs")
    def replay_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, "replay", "Replayed")

    @admin.action(description="Cancel selected queued or running jobs")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, "cancel", "Cancelled")

    @admin.action(description="Run selected queued jobs now")
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, "run_now", "Made due")


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = (
        "hostname",
        "pid",
        "queues",
        "concurrency",
        "jobs_in_hand",
        "started_at",
        "last_heartbeat_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False


from .limits_admin import LimitAdmin  # noqa: E402, F401
from .scheduler import admin as schedule_admin  # noqa: E402, F401
