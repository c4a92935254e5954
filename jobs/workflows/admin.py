"""The console's workflow pages: the list, and a detail page with the graph (server-side
SVG), each node's state and job, and the actions: cancel, send a signal, retry a failed step.
Rows are read-only; every action calls jobs.workflows, which writes through jobs.store,
needs the right to change jobs and is written to Django's admin log (the workflow's history)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import ngettext

from ..console.moments import deadline, moment_column
from ..console.names import admin_url_name
from ..exceptions import JobsError
from ..models import Job
from ..models import Workflow as WorkflowRow
from . import graph
from .runs import Workflow, cancel, retry_step, send_signal

FAILED_STEP_STATES = ("dead", "expired")


@admin.register(WorkflowRow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ("short_id", "name", "status_badge", "started", "finished", "error_line")
    list_filter = ("status",)
    search_fields = ("=id", "name")
    ordering = ("-created_at",)
    show_full_result_count = False
    actions = ("cancel_workflows",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WorkflowRow | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: WorkflowRow | None = None) -> bool:
        return False

    started = moment_column("created_at", "started")
    finished = moment_column("finished_at", "finished")

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: WorkflowRow) -> str:
        return str(obj.id)[:13] + "…"

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: WorkflowRow) -> str:
        return format_html('<span class="wf-status wf-{}">{}</span>', obj.status, obj.status)

    @admin.display(description="error")
    def error_line(self, obj: WorkflowRow) -> str:
        return obj.error[:80] or "-"

    @admin.action(description="Cancel selected running workflows", permissions=["act"])
    def cancel_workflows(self, request: HttpRequest, queryset: QuerySet[WorkflowRow]) -> None:
        done = 0
        for workflow_id in queryset.values_list("id", flat=True):
            status = cancel(workflow_id)
            self._log(request, workflow_id, f"Cancel: the workflow is {status}.")
            done += status == "cancelled"
        self.message_user(
            request,
            ngettext("Cancelled %(count)d workflow.", "Cancelled %(count)d workflows.", done)
            % {"count": done},
            messages.SUCCESS,
        )

    def _log(self, request: HttpRequest, workflow_id: uuid.UUID, message: str) -> None:
        row = WorkflowRow.objects.filter(id=workflow_id).first()
        if row is not None:
            self.log_change(request, row, message)

    def has_act_permission(self, request: HttpRequest) -> bool:
        return _may_act(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {**(extra_context or {}), "wf_style": STYLE})

    # --- the detail page and its actions ---------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        # <app_label>_workflow_<page>, like the admin's own names: they follow the label the
        # engine is installed under.
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path("<uuid:workflow_id>/cancel/", self.admin_site.admin_view(self.cancel_view),
                 name=f"{name}_cancel"),
            path("<uuid:workflow_id>/signal/", self.admin_site.admin_view(self.signal_view),
                 name=f"{name}_signal"),
            path("<uuid:workflow_id>/retry/<uuid:job_id>/", self.admin_site.admin_view(self.retry_view),
                 name=f"{name}_retry"),
        ]  # fmt: skip
        return own + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        row = get_object_or_404(WorkflowRow, id=_uuid_or_404(object_id))
        run = Workflow(row.id)
        nodes = run.nodes
        job_change = admin_url_name(Job._meta, "change")
        svg = graph.render(nodes, job_url=lambda job_id: reverse(job_change, args=[job_id]))
        compensating = {n.id for n in nodes if n.kind == "compensation"}
        steps = [n for n in nodes if n.kind == "step" and n.parent not in compensating]
        # A failed step can run again unless compensations already undid the rest.
        undone = any(
            n.kind == "compensation" and n.state in ("running", "succeeded", "failed") for n in nodes
        )
        failed = [] if undone else [n for n in steps if n.state in FAILED_STEP_STATES]
        waits = [n for n in nodes if n.kind == "signal" and n.state in ("pending", "running")]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "job_opts": Job._meta,
            "title": f"Workflow {run.name or run.id}",
            "run": run,
            "result_json": json.dumps(run.result, ensure_ascii=False),
            "graph": mark_safe(svg),  # noqa: S308 - built by graph.render, every text escaped
            "rows": [(n, _shown(n)) for n in nodes if n.kind != "chain"][:200],
            "node_count": len(nodes),
            "steps_done": sum(n.state == "succeeded" for n in steps),
            "steps_total": len(steps),
            "failed_steps": failed[:20],
            "waits": waits,
            "can_act": _may_act(request),
            "can_cancel": run.status in ("running", "compensating"),
            "wf_style": STYLE,
        }
        return TemplateResponse(request, "admin/jobs/workflow/detail.html", context)

    def cancel_view(self, request: HttpRequest, workflow_id: uuid.UUID) -> HttpResponse:
        _check_may_act(request)
        if request.method == "POST":
            status = _act(request, lambda: cancel(workflow_id))
            if status:
                self._log(request, workflow_id, f"Cancel: the workflow is {status}.")
                self.message_user(request, f"The workflow is {status}.", messages.SUCCESS)
        return _back(workflow_id)

    def signal_view(self, request: HttpRequest, workflow_id: uuid.UUID) -> HttpResponse:
        _check_may_act(request)
        if request.method == "POST":
            name = request.POST.get("name", "").strip()
            raw = request.POST.get("payload", "").strip()
            try:
                payload = json.loads(raw) if raw else None
            except ValueError as exc:
                self.message_user(
                    request, f"The payload is not JSON ({exc}); nothing was sent.", messages.ERROR
                )
                return _back(workflow_id)
            outcome = _act(request, lambda: send_signal(workflow_id, name, payload))
            if outcome:
                self._log(
                    request,
                    workflow_id,
                    f"Sent signal {name!r} with payload {raw[:500] or 'null'}: {outcome}.",
                )
                self.message_user(request, f"Signal {name!r}: {outcome}.", messages.SUCCESS)
        return _back(workflow_id)

    def retry_view(self, request: HttpRequest, workflow_id: uuid.UUID, job_id: uuid.UUID) -> HttpResponse:
        _check_may_act(request)
        if request.method == "POST":
            outcome = _act(request, lambda: retry_step(job_id))
            if outcome:
                self._log(request, workflow_id, f"Retry of step job {job_id}: {outcome}.")
            if outcome == "retried":
                self.message_user(request, "The step runs again; the workflow goes on.", messages.SUCCESS)
            elif outcome:
                messages.warning(request, f"Not retried: {outcome}.")
        return _back(workflow_id)


def _may_act(request: HttpRequest) -> bool:
    """Cancel, signal and retry change what runs: they need the right to change jobs."""
    return bool(request.user.has_perm(f"{Job._meta.app_label}.change_job"))


def _check_may_act(request: HttpRequest) -> None:
    if not _may_act(request):
        raise PermissionDenied


def _shown(node: Any) -> str:
    """What the node table says of a node: its error, its result as JSON, or when it times out."""
    if node.error:
        return str(node.error)
    if node.kind == "signal" and node.state == "running" and node.deadline:
        return f"times out {deadline(node.deadline)}"
    if node.result is None:
        return ""
    return json.dumps(node.result, ensure_ascii=False)


def _act(request: HttpRequest, action: Any) -> str | None:
    try:
        return str(action())
    except JobsError as exc:
        messages.error(request, str(exc))
        return None


def _back(workflow_id: uuid.UUID) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse(admin_url_name(WorkflowRow._meta, "change"), args=[workflow_id]))


def _uuid_or_404(value: str) -> uuid.UUID:
    from django.http import Http404

    try:
        return uuid.UUID(value)
    except ValueError:
        raise Http404("no such workflow") from None


STYLE = mark_safe(
    """<style>
.wf-status { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 11px;
             font-weight: 600; }
.wf-running { background: #e3eefc; color: #2f6fd0; } .wf-compensating { background: #fff6dc; color: #9a6f00; }
.wf-succeeded { background: #e3f4e8; color: #2e7d4f; } .wf-failed { background: #fde7e7; color: #c0392b; }
.wf-cancelled { background: #ececec; color: #555; }
.wf-dead, .wf-expired { background: #fde7e7; color: #c0392b; }
.wf-queued, .wf-scheduled { background: #fff6dc; color: #9a6f00; }
.wf-waiting, .wf-pending { background: #f2f2f2; color: #666; }
.wf-graph-box { overflow-x: auto; border: 1px solid var(--hairline-color); border-radius: 6px; padding: 8px;
                background: var(--body-bg); margin: 0 0 1.2em; }
.wf-graph .wf-label { font: 600 12px system-ui, sans-serif; fill: #222; }
.wf-graph .wf-state { font: 11px system-ui, sans-serif; }
.wf-graph .wf-caption { font: 11px system-ui, sans-serif; fill: #666; }
.wf-graph-box svg a, .wf-graph-box svg a:link, .wf-graph-box svg a:visited {
    text-decoration: none !important; }
.wf-graph a:hover rect { stroke-width: 2.5; }
.wf-summary { display: flex; flex-wrap: wrap; gap: 2em; margin: .3em 0 1em; }
.wf-summary div b { display: block; font-size: 11px; color: var(--body-quiet-color);
                    text-transform: uppercase; }
.wf-actions { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-end; margin: 0 0 1.2em; }
.wf-actions form { display: flex; gap: .5em; align-items: center; }
.wf-actions input[type=text] { width: 14em; }
.wf-nodes td, .wf-nodes th { padding: 4px 10px; }
.wf-nodes .result { font-family: monospace; font-size: 11px; max-width: 28em; overflow: hidden;
                    text-overflow: ellipsis; white-space: nowrap; }
</style>"""
)
