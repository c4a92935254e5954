"""The operations console. Job rows are read-only here; every action goes through jobs.store,
needs its own permission (jobs.Job's Meta) and is written to Django's admin log.

The list at a million rows is jobs/console.py (filters, search, counts without COUNT);
the dashboard is jobs/dashboard.py; the actions' pages are here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.options import ActionLocation
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.views.decorators.http import require_POST

from . import console, store
from .exceptions import InvalidPayload, JobsError
from .models import FINISHED_STATES, FireRecord, Job, PausedQueue, Worker
from .progress import view as progress_view
from .states import State

# Jobs one bulk action (replay, cancel, discard) touches at most; the confirmation page
# says how many match.
BULK_CAP = 1000
REPLAYABLE = [State.DEAD, State.CANCELLED, State.EXPIRED]
CANCELLABLE = [State.SCHEDULED, State.QUEUED, State.RUNNING]
# What the list loads: never the payload, result or tracebacks.
_LIST_COLUMNS = (
    "id", "task_path", "queue_name", "state", "attempt", "max_attempts", "run_at", "created_at",
    "last_attempted_at", "finished_at", "last_error", "limit_name", "limit_wait", "progress",
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


def _paused() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM jobs_paused_queue")
        return {name for (name,) in cursor.fetchall()}


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "short_id",
        "task",
        "queue",
        "console_state",
        "attempts",
        "error",
        "created",
        "ran_or_runs_at",
        "duration",
    )
    list_display_links = ("short_id",)
    list_filter = (console.StateFilter, console.QueueFilter, console.TaskFilter, console.CreatedFilter)
    search_fields = ("id",)  # the search box; jobs.console.search does the searching
    search_help_text = "Job id, trace id, dedupe key, or text of the last error (3+ characters)."
    ordering = ("-id",)
    list_per_page = 50
    # "Show all" would load every row the (estimated) count hides.
    list_max_show_all = 0
    show_full_result_count = False
    actions = ("replay_jobs", "cancel_jobs", "run_jobs_now", "discard_jobs")
    change_form_template = "admin/jobs/job/change_form.html"
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
        return request.user.has_perm(f"jobs.{codename}")

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

    def get_actions(
        self, request: HttpRequest, action_location: ActionLocation = ActionLocation.CHANGE_LIST
    ) -> dict[str, Any]:
        actions = super().get_actions(request, action_location=action_location)
        # Django's own deletes unfinished jobs too and lists every row first.
        actions.pop("delete_selected", None)
        return actions

    # --- the list ----------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "jobs_job_changelist":
            queryset = queryset.only(*_LIST_COLUMNS).annotate(
                last_exception=RawSQL("errors -> -1 ->> 'exception'", []),
                queue_paused=Exists(PausedQueue.objects.filter(name=OuterRef("queue_name"))),
            )
        return queryset

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        return console.search(queryset, search_term), False

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> console.EstimatedPaginator:
        total, exact = console.estimated_count(request, queryset)
        request.jobs_count_exact = exact  # type: ignore[attr-defined]
        return console.EstimatedPaginator(queryset, per_page, total=total, exact=exact)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        response = super().changelist_view(request, extra_context)
        if hasattr(response, "context_data"):
            response.context_data["count_exact"] = getattr(request, "jobs_count_exact", True)
        return response

    @admin.display(description="id", ordering="id")
    def short_id(self, job: Job) -> str:
        return format_html("<code title='{}'>{}</code>", job.id, job.id.hex[-8:])

    @admin.display(description="task", ordering="task_path")
    def task(self, job: Job) -> str:
        return format_html("<span title='{}'>{}</span>", job.task_path, Truncator(job.task_path).chars(44))

    @admin.display(description="queue", ordering="queue_name")
    def queue(self, job: Job) -> str:
        paused = getattr(job, "queue_paused", False)
        return format_html("{}{}", job.queue_name, " (paused)" if paused else "")

    @admin.display(description="state")
    def console_state(self, job: Job) -> str:
        shown = console.console_state(job)
        progress = _progress_text(job) if job.state == State.RUNNING else ""
        return format_html(
            "<span class='job-state job-state-{}'>{}</span>{}",
            job.state, shown, format_html("<br><small>{}</small>", progress) if progress else "",
        )  # fmt: skip

    @admin.display(description="tries")
    def attempts(self, job: Job) -> str:
        return f"{job.attempt}/{job.max_attempts}"

    @admin.display(description="last error")
    def error(self, job: Job) -> str:
        if not job.last_error:
            return "-"
        first_line = job.last_error.strip().splitlines()[0] if job.last_error.strip() else ""
        cls = console.error_class(getattr(job, "last_exception", None) or "")
        return format_html(
            "<span class='job-error' title='{}'><strong>{}</strong> {}</span>",
            job.last_error[:500],
            cls,
            Truncator(first_line).chars(60),
        )

    @admin.display(description="created", ordering="id")
    def created(self, job: Job) -> str:
        return console.moment(job.created_at)

    @admin.display(description="run at / finished")
    def ran_or_runs_at(self, job: Job) -> str:
        return console.moment(job.finished_at or job.run_at)

    @admin.display(description="took")
    def duration(self, job: Job) -> str:
        if job.last_attempted_at is None:
            return "-"
        if job.state == State.RUNNING:
            return console.seconds(timezone.now() - job.last_attempted_at) + "…"
        if job.finished_at is None:
            return "-"
        return console.seconds(job.finished_at - job.last_attempted_at)

    # --- the detail page ---------------------------------------------------------------

    @admin.display(description="state")
    def state_shown(self, job: Job) -> str:
        shown = console.console_state(job)
        limit = f" (limit key {job.limit_key!r})" if job.limit_wait and job.limit_key else ""
        progress = _progress_text(job)
        return format_html(
            "<span class='job-state job-state-{}'>{}</span>{} · attempt {} of {}{}",
            job.state, shown, limit, job.attempt, job.max_attempts,
            f" · progress {progress}" if progress else "",
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
            ("created", console.moment(job.created_at)), ("run at", console.moment(job.run_at)),
            ("first started", console.moment(job.started_at)),
            ("last attempt began", console.moment(job.last_attempted_at)),
            ("finished", console.moment(job.finished_at)),
            ("not started after", console.moment(job.expires_at)),
            ("lease until", console.moment(job.lease_expires_at)), ("held by", self.owner_worker(job)),
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

    @admin.display(description="attempts")
    def attempt_history(self, job: Job) -> str:
        rows: list[tuple[Any, ...]] = []
        for error in job.errors:
            started = error.get("started_at")
            rows.append(
                (
                    error.get("attempt", "?"),
                    _worker_name(error.get("worker")),
                    _iso_moment(started),
                    _iso_moment(error.get("at")),
                    _iso_duration(started, error.get("at")),
                    error.get("exception", ""),
                    error.get("message", ""),
                    error.get("traceback", ""),
                )
            )
        failed = {error.get("attempt") for error in job.errors}
        if job.attempt and job.attempt not in failed and job.last_attempted_at is not None:
            end = job.finished_at if job.state in FINISHED_STATES else None
            outcome = "running" if job.state == State.RUNNING else str(job.state)
            rows.append(
                (
                    job.attempt,
                    _worker_name(str(job.worker_ids[-1]) if job.worker_ids else None),
                    console.moment(job.last_attempted_at),
                    console.moment(end),
                    console.seconds(end - job.last_attempted_at) if end else "-",
                    outcome,
                    "",
                    "",
                )
            )
        if not rows:
            return "-"
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td><strong>{}</strong> {}<pre class='traceback'>{}</pre></td></tr>",
            rows,
        )
        return format_html(
            "<table class='attempts'><thead><tr><th>#</th><th>worker</th><th>started</th><th>ended</th>"
            "<th>took</th><th>outcome</th></tr></thead><tbody>{}</tbody></table>",
            body,
        )

    @admin.display(description="payload edits")
    def payload_history(self, job: Job) -> str:
        if not job.edits:
            return "-"
        return format_html_join(
            "",
            "<div class='edit'><p>Replaced at {} by {}:</p><pre>args = {}\nkwargs = {}</pre></div>",
            (
                (_iso_moment(e.get("at")), e.get("by") or "?", console.pretty_json(e.get("args")),
                 console.pretty_json(e.get("kwargs")))
                for e in job.edits
            ),
        )  # fmt: skip

    @admin.display(description="args")
    def args_pretty(self, job: Job) -> str:
        return format_html("<pre class='payload'>{}</pre>", console.pretty_json(job.args))

    @admin.display(description="kwargs")
    def kwargs_pretty(self, job: Job) -> str:
        return format_html("<pre class='payload'>{}</pre>", console.pretty_json(job.kwargs))

    @admin.display(description="result")
    def result_pretty(self, job: Job) -> str:
        if job.state != State.SUCCEEDED:
            return "-"
        return format_html("<pre class='payload'>{}</pre>", console.pretty_json(job.result))

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

    # --- actions on one job (the detail page's buttons) --------------------------------

    def get_urls(self) -> list[Any]:
        wrap: Callable[..., Any] = self.admin_site.admin_view
        return [
            path("<path:object_id>/do/<str:operation>/", wrap(self.operate_view), name="jobs_job_operate"),
            path("<path:object_id>/edit-replay/", wrap(self.edit_replay_view), name="jobs_job_edit_replay"),
            path("queues/<str:queue>/<str:operation>/", wrap(self.queue_view), name="jobs_queue_operate"),
            *super().get_urls(),
        ]

    _OPERATIONS: dict[str, tuple[str, str, str]] = {
        # operation: (permission check, store function, past tense)
        "replay": ("has_replay_permission", "replay", "Replayed"),
        "cancel": ("has_cancel_permission", "cancel", "Cancelled"),
        "run-now": ("has_run_now_permission", "run_now", "Made due"),
    }

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        return require_POST(self._operate)(request, object_id, operation)

    def _operate(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        if operation not in self._OPERATIONS:
            raise Http404("no such operation")
        check, function, verb = self._OPERATIONS[operation]
        if not getattr(self, check)(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404("no such job")
        before = job.state
        try:
            getattr(store, function)(job.id)
        except JobsError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            after = Job.objects.values_list("state", flat=True).get(id=job.id)
            self._log(request, [job], f"{verb}: {before} -> {after}")
            self.message_user(request, f"{verb} job {job.id}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[job.pk]))

    def edit_replay_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_edit_replay_permission(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404("no such job")
        args_text = console.pretty_json(job.args)
        kwargs_text = console.pretty_json(job.kwargs)
        problem = ""
        if request.method == "POST":
            args_text = request.POST.get("args", "")
            kwargs_text = request.POST.get("kwargs", "")
            try:
                args, kwargs = _parse_payload(args_text, kwargs_text)
                from .backend import check_payload

                check_payload(job.task_path, args, kwargs)
                store.replay(job.id, args=args, kwargs=kwargs, edited_by=request.user.get_username())
            except (InvalidPayload, JobsError) as exc:
                problem = str(exc)
            else:
                self._log(
                    request,
                    [job],
                    f"Edited the arguments and replayed: was args={json.dumps(job.args)} "
                    f"kwargs={json.dumps(job.kwargs)}; "
                    f"now args={json.dumps(args)} kwargs={json.dumps(kwargs)}",
                )
                self.message_user(request, f"Replayed job {job.id} with the new arguments.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[job.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "job": job,
            "title": f"Edit the arguments of {job.task_path} and replay it",
            "args_text": args_text,
            "kwargs_text": kwargs_text,
            "problem": problem,
        }
        return TemplateResponse(
            request, "admin/jobs/job/edit_replay.html", context, status=400 if problem else 200
        )

    def queue_view(self, request: HttpRequest, queue: str, operation: str) -> HttpResponse:
        return require_POST(self._queue)(request, queue, operation)

    def _queue(self, request: HttpRequest, queue: str, operation: str) -> HttpResponse:
        if operation not in ("pause", "resume"):
            raise Http404("no such operation")
        if not self.has_pause_permission(request):
            raise PermissionDenied
        if operation == "pause":
            changed = store.pause_queue(queue, by=request.user.get_username())
        else:
            changed = store.resume_queue(queue)
        verb = "Paused" if operation == "pause" else "Resumed"
        if changed:
            LogEntry.objects.log_actions(
                user_id=_user_id(request),
                queryset=[PausedQueue(name=queue)],
                action_flag=ADDITION if operation == "pause" else DELETION,
                change_message=f"{verb} queue {queue!r}",
                single_object=True,
            )
            self.message_user(request, f"{verb} queue {queue}.", messages.SUCCESS)
        else:
            self.message_user(request, f"Queue {queue} was already {verb.lower()}.", messages.WARNING)
        target = request.POST.get("next") or reverse("jobs-dashboard")
        if not target.startswith("/") or target.startswith("//"):
            target = reverse("jobs-dashboard")
        return HttpResponseRedirect(target)

    # --- bulk actions (the list) -------------------------------------------------------

    def _log(self, request: HttpRequest, jobs: list[Job], message: str, *, flag: int = CHANGE) -> None:
        LogEntry.objects.log_actions(
            user_id=_user_id(request), queryset=jobs, action_flag=flag, change_message=message
        )

    def _bulk(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        *,
        action: str,
        states: list[State],
        verb: str,
        ask: str,
        apply: Callable[[Job], None],
    ) -> HttpResponse | None:
        """Confirm first when more than one job matches (saying how many, up to the cap),
        then apply to at most BULK_CAP of them, each through the store, each logged."""
        eligible = queryset.filter(state__in=states).order_by("id")
        matching = eligible[: BULK_CAP + 1].count()
        if matching > 1 and request.POST.get("confirmed") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"{ask} {min(matching, BULK_CAP)} job(s)?",
                "action": action,
                "verb": ask,
                "matching": min(matching, BULK_CAP),
                "capped": matching > BULK_CAP,
                "cap": BULK_CAP,
                "skipped_states": ", ".join(states),
                "post": request.POST,
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "select_across": request.POST.get("select_across", "0"),
                "sample": list(eligible.only("id", "task_path", "state", "queue_name")[:10]),
            }
            return TemplateResponse(request, "admin/jobs/job/confirm_bulk.html", context)
        done: list[Job] = []
        refused: list[str] = []
        for job in eligible.only("id", "task_path", "state", "queue_name")[:BULK_CAP]:
            try:
                apply(job)
                done.append(job)
            except JobsError as exc:
                refused.append(str(exc))
        if done:
            self._log(request, done, f"{verb} (was {', '.join(sorted({j.state for j in done}))})",
                      flag=DELETION if action == "discard_jobs" else CHANGE)  # fmt: skip
            self.message_user(request, f"{verb} {len(done)} job(s).", messages.SUCCESS)
        elif not refused:
            self.message_user(
                request,
                f"No selected job can be {verb.lower()}: this needs one of {', '.join(states)}.",
                messages.WARNING,
            )
        for reason in refused[:10]:
            self.message_user(request, reason, messages.WARNING)
        return None

    @admin.action(description="Replay selected dead, cancelled or expired jobs", permissions=["replay"])
    def replay_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._bulk(request, queryset, action="replay_jobs", states=REPLAYABLE, verb="Replayed",
                          ask="Replay", apply=lambda job: store.replay(job.id))  # fmt: skip

    @admin.action(description="Cancel selected scheduled, queued or running jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._bulk(request, queryset, action="cancel_jobs", states=CANCELLABLE, verb="Cancelled",
                          ask="Cancel", apply=lambda job: store.cancel(job.id))  # fmt: skip

    @admin.action(description="Run selected scheduled jobs now", permissions=["run_now"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._bulk(request, queryset, action="run_jobs_now", states=[State.SCHEDULED, State.QUEUED],
                          verb="Made due", ask="Run now",
                          apply=lambda job: store.run_now(job.id))  # fmt: skip

    @admin.action(description="Discard (delete) selected finished jobs", permissions=["delete"])
    def discard_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        def delete(job: Job) -> None:
            # Only while it is still finished: a job replayed meanwhile stays.
            if not Job.objects.filter(id=job.id, state__in=FINISHED_STATES).delete()[0]:
                raise JobsError(f"job {job.id} is no longer finished; kept")

        return self._bulk(request, queryset, action="discard_jobs", states=list(FINISHED_STATES),
                          verb="Discarded", ask="Discard", apply=delete)  # fmt: skip


def _table(rows: list[tuple[str, str]]) -> str:
    return format_html(
        "<table class='job-facts'>{}</table>", format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
    )


def _user_id(request: HttpRequest) -> Any:
    return request.user.pk


def _parse_payload(args_text: str, kwargs_text: str) -> tuple[list[Any], dict[str, Any]]:
    try:
        args = json.loads(args_text or "[]")
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"args is not valid JSON: {exc}") from exc
    try:
        kwargs = json.loads(kwargs_text or "{}")
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"kwargs is not valid JSON: {exc}") from exc
    if not isinstance(args, list):
        raise InvalidPayload('args must be a JSON list, e.g. [1, "two"]')
    if not isinstance(kwargs, dict):
        raise InvalidPayload('kwargs must be a JSON object, e.g. {"user_id": 42}')
    return args, kwargs


def _links(job: Job) -> list[tuple[str, str]]:
    """Where else this job appears: the schedule that fired it, and any record of another
    app that names it in a ``job_id`` column (email and push deliveries, workflow nodes)."""
    found: list[tuple[str, str]] = []
    fire = FireRecord.objects.filter(job_id=job.id).select_related("schedule").first()
    if fire is not None:
        found.append(
            (reverse("admin:jobs_schedule_change", args=[fire.schedule_id]), f"schedule {fire.schedule.name}")
        )
    for model in admin.site._registry:
        if model is Job or model is FireRecord:
            continue
        if "job_id" not in {f.name for f in model._meta.get_fields()}:
            continue
        if model._default_manager.filter(job_id=job.id).exists():
            url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
            found.append((f"{url}?job_id={job.id}", str(model._meta.verbose_name_plural)))
    return found


def _worker_name(token: str | None) -> str:
    if not token:
        return "-"
    worker = Worker.objects.filter(slot_tokens__contains=[token]).first()
    return f"{worker.hostname}:{worker.pid}" if worker else f"token {str(token)[:8]}"


def _iso_moment(value: Any) -> str:
    if not value:
        return "-"
    from datetime import datetime

    try:
        return console.moment(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def _iso_duration(start: Any, end: Any) -> str:
    from datetime import datetime

    if not start or not end:
        return "-"
    try:
        return console.seconds(datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start)))
    except ValueError:
        return "-"


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = (
        "hostname",
        "pid",
        "queues_shown",
        "concurrency",
        "jobs_in_hand",
        "started_at",
        "last_heartbeat_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    @admin.display(description="queues")
    def queues_shown(self, worker: Worker) -> str:
        paused = _paused()
        parts = [p.split(":")[0] for p in worker.queues.split(",") if p]
        return ", ".join(f"{name} (paused)" if name in paused else name for name in parts)


from .limits_admin import LimitAdmin  # noqa: E402, F401
from .scheduler import admin as schedule_admin  # noqa: E402, F401
from .workflows import admin as workflow_admin  # noqa: E402, F401
