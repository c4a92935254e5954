"""The console's page for rate and concurrency limits: see each limit, who waits on it,
change or lift it at run time (workers follow at their next claim)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, OuterRef, QuerySet, Subquery, Sum
from django.http import HttpRequest
from django.utils.translation import ngettext

from .. import store
from ..limits import CONSOLE
from ..models import Job, Limit, LimitState
from ..states import State


@admin.register(Limit)
class LimitAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "rate_per_second",
        "burst",
        "concurrency",
        "per_key",
        "running",
        "waiting",
        "source",
    )
    search_fields = ("name",)
    fields = ("name", "rate", "burst", "concurrency", "per_key", "source")
    readonly_fields = ("source",)
    actions = ("lift",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Limit]:
        running = (
            LimitState.objects.filter(limit_name=OuterRef("name"))
            .values("limit_name")
            .annotate(n=Sum("running"))
        )
        waiting = (
            Job.objects.filter(limit_name=OuterRef("name"), state=State.SCHEDULED)
            .exclude(limit_wait="")
            .values("limit_name")
            .annotate(n=Count("id"))
        )
        return (
            super()
            .get_queryset(request)
            .annotate(running_now=Subquery(running.values("n")), waiting_now=Subquery(waiting.values("n")))
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Limit | None = None) -> tuple[str, ...]:
        return ("name", "source") if obj is not None else ("source",)

    @admin.display(description="rate (/s)", ordering="rate")
    def rate_per_second(self, obj: Limit) -> str:
        return "-" if obj.rate is None else f"{obj.rate:g}"

    @admin.display(description="running")
    def running(self, obj: Any) -> int:
        return obj.running_now or 0

    @admin.display(description="waiting")
    def waiting(self, obj: Any) -> int:
        return obj.waiting_now or 0

    def save_model(self, request: HttpRequest, obj: Limit, form: Any, change: bool) -> None:
        # What an operator sets stands until reset: code and settings no longer rewrite it.
        obj.source = CONSOLE
        super().save_model(request, obj, form, change)
        woken = store.limit_changed(obj.name)
        if woken:
            self.message_user(
                request,
                ngettext(
                    "%(count)d waiting job will be decided again under the new limit.",
                    "%(count)d waiting jobs will be decided again under the new limit.",
                    woken,
                )
                % {"count": woken},
            )

    @admin.action(
        description="Lift the selected limits (no rate, no concurrency limit)", permissions=["change"]
    )
    def lift(self, request: HttpRequest, queryset: QuerySet[Limit]) -> None:
        # A lifted limit keeps its row (jobs still name it) with nothing to enforce.
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            Limit.objects.filter(name=name).update(rate=None, concurrency=None, source=CONSOLE)
            store.limit_changed(name)
            self.log_change(request, Limit.objects.get(name=name), "Lifted: no rate, no concurrency limit.")
        self.message_user(
            request,
            ngettext("Lifted %(count)d limit.", "Lifted %(count)d limits.", len(names))
            % {"count": len(names)},
            messages.SUCCESS,
        )
