"""Console pages for schedules: list with next fire times, enable/disable, run now, and a
preview of the next five fire times in the schedule's own zone.

Enable, disable and run now need the change permission and are written to the admin log.

Validation errors come from ``Schedule.clean`` (jobs/scheduler/validation.py) and show on
the form. Code-declared schedules are owned by their declaration (jobs/scheduler/declared.py):
here only their ``enabled`` flag can change, and they cannot be deleted (the next start
would bring them back).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import ngettext

from .. import selectors
from ..console.moments import deadline, moment
from ..exceptions import JobsError
from ..models import Catchup, FireRecord, Overlap, Schedule, ScheduleSource
from .cron import InvalidTiming, zone_named
from .fire import run_now
from .validation import describe, schedule_errors, timing_of

_SECTIONS: tuple[tuple[str | None, tuple[str, ...]], ...] = (
    (None, ("name", "task_path", "args", "kwargs", "enabled")),
    ("When", ("cron", "interval_seconds", "time_zone", "next_five")),
    ("How", ("queue_name", "priority", "catchup", "catchup_window", "overlap")),
    ("State", ("source", "next_fire", "last_fired", "recent_fires", "revision")),
)
_EDITABLE_WHEN_DECLARED = {"enabled"}
# The list's short words for the policies (the form shows their full labels).
_CATCHUP_SHORT: dict[str, str] = {
    Catchup.SKIP: "skip missed",
    Catchup.LATEST: "latest missed",
    Catchup.ALL: "all missed",
}
_OVERLAP_SHORT: dict[str, str] = {Overlap.ALLOW: "overlap allowed", Overlap.SKIP: "no overlap"}


def _local(when: datetime | None, zone_name: str, *, relative: bool = False, offset: bool = False) -> str:
    """``when`` in the schedule's own zone, as the console writes moments, with the zone's
    abbreviation ("tomorrow 01:30 -03", "7 Dec 09:00 WIB") and, where two slots may share
    a wall-clock time (a DST change), its UTC offset too."""
    if when is None:
        return "-"
    try:
        zone = zone_named(zone_name)
    except InvalidTiming:
        return f"{moment(when, zone=UTC)} UTC (unknown zone)"
    local = when.astimezone(zone)
    shown = deadline(when, zone=zone) if relative else moment(when, zone=zone)
    return f"{shown} {local.tzname()}" + (f" (UTC{local:%z})" if offset else "")


def _again(seq: int) -> str:
    """Marks the second slot at one instant (after a spring-forward gap, see cron.py)."""
    return " (second slot at this instant)" if seq else ""


class ScheduleForm(forms.ModelForm):
    """The schedule's fields, with messages that say how to write what could not be read."""

    class Meta:
        model = Schedule
        fields = "__all__"
        error_messages = {
            "args": {
                "invalid": 'The arguments are not valid JSON. Enter a JSON list, such as [42, "weekly"], '
                "or [] for none."
            },
            "kwargs": {
                "invalid": "The keyword arguments are not valid JSON. Enter a JSON object, such as "
                '{"label": "nightly"}, or {} for none.'
            },
        }


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("name_and_task", "timing", "enabled", "next_fire", "policy", "source_shown", "problems")
    list_display_links = ("name_and_task",)
    list_filter = ("enabled", "source", "catchup", "overlap", "queue_name")
    search_fields = ("name", "task_path")
    ordering = ("name",)
    actions = ("enable_schedules", "disable_schedules", "run_schedules_now")
    fieldsets = tuple((title, {"fields": names}) for title, names in _SECTIONS)
    readonly_fields = ("next_five", "source", "next_fire", "last_fired", "recent_fires", "revision")
    # Names, paths, expressions and zones are one line each.
    formfield_overrides = {models.TextField: {"widget": forms.TextInput(attrs={"size": 60})}}

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> list[str]:
        if obj is not None and obj.source == ScheduleSource.CODE:
            return [name for _, names in _SECTIONS for name in names if name not in _EDITABLE_WHEN_DECLARED]
        return list(self.readonly_fields)

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        if obj is not None and obj.source == ScheduleSource.CODE:
            return False
        return super().has_delete_permission(request, obj)

    # --- columns and read-only fields ---------------------------------------------------

    @admin.display(description="name · task", ordering="name")
    def name_and_task(self, obj: Schedule) -> str:
        return format_html("{}<small>{}</small>", obj.name, obj.task_path)

    @admin.display(description="timing")
    def timing(self, obj: Schedule) -> str:
        if obj.interval_seconds:
            return f"every {obj.interval_seconds}s"
        return format_html("<code class='cron'>{}</code><small>{}</small>", obj.cron, obj.time_zone)

    @admin.display(description="next fire · last fired", ordering="next_fire_at")
    def next_fire(self, obj: Schedule) -> str:
        upcoming = _local(obj.next_fire_at, obj.time_zone, relative=True) if obj.enabled else "disabled"
        last = f"last {_local(obj.last_fired_at, obj.time_zone)}" if obj.last_fired_at else "never fired"
        return format_html("{}<small>{}</small>", upcoming, last)

    @admin.display(description="catch-up · overlap")
    def policy(self, obj: Schedule) -> str:
        return format_html("{}<small>{}</small>", _CATCHUP_SHORT.get(obj.catchup, obj.catchup),
                           _OVERLAP_SHORT.get(obj.overlap, obj.overlap))  # fmt: skip

    @admin.display(description="last fired", ordering="last_fired_at")
    def last_fired(self, obj: Schedule) -> str:
        return _local(obj.last_fired_at, obj.time_zone)

    @admin.display(description="source", ordering="source")
    def source_shown(self, obj: Schedule) -> str:
        return "code" if obj.source == ScheduleSource.CODE else "admin"

    @admin.display(description="problems")
    def problems(self, obj: Schedule) -> str:
        """What makes the scheduler skip this schedule, as it would log it."""
        errors = schedule_errors(obj)
        return describe(errors) if errors else "-"

    @admin.display(description="next five fire times")
    def next_five(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "Shown once the schedule is saved."
        try:
            slots = timing_of(obj).upcoming(selectors.database_now(), 5)
        except InvalidTiming as exc:
            return f"Cannot be computed: {exc}"
        return format_html_join(
            "",
            "<div>{}{}</div>",
            ((_local(slot.at, obj.time_zone, offset=True), _again(slot.seq)) for slot in slots),
        )

    @admin.display(description="recent fires")
    def recent_fires(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "-"
        records = FireRecord.objects.filter(schedule=obj).order_by("-id")[:10]
        return (
            format_html_join(
                "",
                "<div>{}{} &middot; {}{} &middot; job {}</div>",
                (
                    (
                        _local(r.slot, obj.time_zone, offset=True),
                        _again(r.slot_seq),
                        r.outcome,
                        " (manual)" if r.manual else "",
                        r.job_id or "-",
                    )
                    for r in records
                ),
            )
            or "none yet"
        )

    # --- actions ------------------------------------------------------------------------

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool) -> None:
        changed = 0
        verb = "Enabled" if enabled else "Disabled"
        for schedule in queryset:
            if schedule.enabled != enabled:
                schedule.enabled = enabled
                # save() bumps the revision and restarts the timing from now.
                schedule.save(update_fields=["enabled"])
                self.log_change(request, schedule, f"{verb} the schedule.")
                changed += 1
        self.message_user(
            request, f"{verb} {changed} {ngettext('schedule', 'schedules', changed)}.", messages.SUCCESS
        )

    @admin.action(description="Enable selected schedules", permissions=["change"])
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    # Firing out of turn is a change to what the schedule does, so it needs the change permission.
    @admin.action(
        description="Run selected schedules now (ignores timing and overlap)", permissions=["change"]
    )
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            try:
                fired = run_now(schedule)
            except JobsError as exc:
                self.message_user(request, f"Schedule {schedule.name} not run: {exc}", messages.ERROR)
                continue
            self.log_change(request, schedule, f"Ran the schedule now: enqueued job {fired.job_id}.")
            self.message_user(
                request, f"Schedule {schedule.name}: enqueued job {fired.job_id}.", messages.SUCCESS
            )
