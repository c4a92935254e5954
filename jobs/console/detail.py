"""The console's page of one job: its facts and times, where else it appears, its runs
across replays (history.py), its payload edits, arguments and result, and the buttons of
the actions its state and the operator's permissions allow (actions.py does them). Mixed
into jobs.console.admin.JobAdmin, whose fieldsets name these fields."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from ..models import FireRecord, Job, Schedule, Worker
from ..observe import job_trace
from ..states import State
from . import changelist, history
from .actions import CANCELLABLE, REPLAYABLE
from .names import admin_url_name


class JobDetail:
    """The detail page of JobAdmin (an admin.ModelAdmin): its permission checks
    (``has_<name>_permission``) are defined there."""

    get_object: Any
    has_replay_permission: Any
    has_edit_replay_permission: Any
    has_cancel_permission: Any
    has_run_now_permission: Any

    @admin.display(description="state")
    def state_shown(self, job: Job) -> str:
        shown = changelist.console_state(job)
        limit = f" (limit key {job.limit_key!r})" if job.limit_wait and job.limit_key else ""
        progress = changelist.progress_text(job)
        runs = history.run_label(job, history.history(job, worker_name=lambda token: ""))
        return format_html(
            "<span class='job-state job-state-{}'>{}</span>{} · {}{}",
            job.state, shown, limit, runs, f" · progress {progress}" if progress else "",
        )  # fmt: skip

    @admin.display(description="job")
    def job(self, job: Job) -> str:
        rows = [
            ("id", str(job.id)), ("task", job.task_path), ("queue", job.queue_name),
            ("priority", str(job.priority)), ("trace id", job_trace(job.trace_id, job.id)),
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
        return super().change_view(request, object_id, form_url, extra)  # type: ignore[misc]

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
