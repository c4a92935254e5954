"""The console's actions: the detail page's buttons (replay, cancel, run now, edit and
replay), pausing and resuming queues, and the list's bulk actions, which ask first when more
than one job matches. Each one checks its own permission, goes through jobs.store, and is
written to Django's admin log. Mixed into jobs.admin.JobAdmin."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.text import get_text_list
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from .. import store
from ..exceptions import InvalidPayload, JobsError
from ..models import FINISHED_STATES, Job, PausedQueue
from ..states import State
from . import changelist, dashboard
from .names import admin_url_name

# Jobs one bulk action (replay, cancel, discard) touches at most; the confirmation page
# says how many match.
BULK_CAP = 1000
REPLAYABLE = [State.DEAD, State.CANCELLED, State.EXPIRED]
CANCELLABLE = [State.SCHEDULED, State.QUEUED, State.RUNNING]


class JobActions:
    """The actions of JobAdmin (an admin.ModelAdmin): its permission checks
    (``has_<name>_permission``) are defined there."""

    admin_site: Any
    opts: Any
    get_object: Any
    message_user: Any
    has_replay_permission: Any
    has_edit_replay_permission: Any
    has_cancel_permission: Any
    has_run_now_permission: Any
    has_pause_permission: Any

    # --- actions on one job (the detail page's buttons) --------------------------------

    def get_urls(self) -> list[Any]:
        wrap: Callable[..., Any] = self.admin_site.admin_view
        # Names follow the admin's <app_label>_<model>_<page> pattern (reversed with
        # admin_urlname), so they follow the label the engine is installed under.
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("<path:object_id>/do/<str:operation>/", wrap(self.operate_view), name=f"{name}_operate"),
            path("<path:object_id>/edit-replay/", wrap(self.edit_replay_view), name=f"{name}_edit_replay"),
            path("queues/<str:queue>/<str:operation>/", wrap(self.queue_view), name=f"{name}_queue_operate"),
            # The dashboard is reached through the admin itself, so a site that mounts only
            # admin.site.urls has it.
            path("dashboard/", wrap(dashboard.view), name=f"{name}_dashboard"),
            *super().get_urls(),  # type: ignore[misc]
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
            if function == "replay":
                store.replay(job.id, by=request.user.get_username())
            else:
                getattr(store, function)(job.id)
        except JobsError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            after = Job.objects.values_list("state", flat=True).get(id=job.id)
            self._log(request, [job], f"{verb}: {before} -> {after}")
            self.message_user(request, f"{verb} job {job.id}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse(admin_url_name(self.opts, "change"), args=[job.pk]))

    def edit_replay_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_edit_replay_permission(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404("no such job")
        args_text = changelist.pretty_json(job.args)
        kwargs_text = changelist.pretty_json(job.kwargs)
        problem = ""
        if request.method == "POST":
            args_text = request.POST.get("args", "")
            kwargs_text = request.POST.get("kwargs", "")
            try:
                args, kwargs = _parse_payload(args_text, kwargs_text)
                from ..backend import check_payload

                check_payload(job.task_path, args, kwargs)
                store.replay(job.id, args=args, kwargs=kwargs, by=request.user.get_username())
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
                return HttpResponseRedirect(reverse(admin_url_name(self.opts, "change"), args=[job.pk]))
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
        dashboard_url = reverse(admin_url_name(self.opts, "dashboard"))
        target = request.POST.get("next") or dashboard_url
        if not target.startswith("/") or target.startswith("//"):
            target = dashboard_url
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
                "title": f"{ask} {min(matching, BULK_CAP)} jobs?",
                "action": action,
                "verb": ask,
                "matching": min(matching, BULK_CAP),
                "capped": matching > BULK_CAP,
                "cap": BULK_CAP,
                "states": get_text_list([str(state) for state in states], "or"),
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
            self.message_user(
                request, f"{verb} {len(done)} {ngettext('job', 'jobs', len(done))}.", messages.SUCCESS
            )
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
                          ask="Replay",
                          apply=lambda job: store.replay(job.id, by=request.user.get_username()))  # fmt: skip

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
