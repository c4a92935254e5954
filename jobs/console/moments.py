"""How the console writes a moment, in one place: "7 Dec 14:03" within the current year,
"7 Dec 2025 14:03" otherwise, in the site's time zone (or a schedule's own). A deadline
names its day when it is near ("today 18:00", "tomorrow 01:39"), so an hour alone never
hides that it is tomorrow. The exact instant, to the second and in UTC, is the tooltip.

Django's own rendering of dates (read-only fields, other apps' lists) follows the same
pattern through config/formats/en/formats.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

_NEAR_DAYS = {-1: "yesterday", 0: "today", 1: "tomorrow"}


def _local(value: datetime, zone: tzinfo | None) -> datetime:
    return timezone.localtime(value, zone) if zone is not None else timezone.localtime(value)


def moment(value: datetime | None, *, zone: tzinfo | None = None, now: datetime | None = None) -> str:
    """``value`` as "7 Dec 14:03" (the year added when it is not this year's); "-" for none."""
    if value is None:
        return "-"
    local = _local(value, zone)
    this_year = _local(now or timezone.now(), zone).year
    day = f"{local.day} {local:%b}" if local.year == this_year else f"{local.day} {local:%b %Y}"
    return f"{day} {local:%H:%M}"


def deadline(value: datetime | None, *, zone: tzinfo | None = None, now: datetime | None = None) -> str:
    """``value`` as "today 18:00", "tomorrow 01:39" or "yesterday 23:10" when it is that
    near, else as moment() writes it."""
    if value is None:
        return "-"
    local = _local(value, zone)
    today = _local(now or timezone.now(), zone).date()
    near = _NEAR_DAYS.get((local.date() - today).days)
    return f"{near} {local:%H:%M}" if near else moment(value, zone=zone, now=now)


def exact(value: datetime) -> str:
    """The instant to the second, in UTC: the tooltip of every moment shown."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def moment_html(value: datetime | None, *, zone: tzinfo | None = None, relative: bool = False) -> SafeString:
    """A ``<time>`` element with the compact text and the exact instant as its tooltip."""
    if value is None:
        return format_html("{}", "-")
    text = deadline(value, zone=zone) if relative else moment(value, zone=zone)
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), exact(value), text)


def moment_column(field: str, description: str) -> Callable[[Any, Any], SafeString]:
    """A change-list column (a ModelAdmin method: assign it in the class body and name it in
    list_display) showing the datetime ``field`` as moment_html() writes it."""

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Any) -> SafeString:
        return moment_html(getattr(obj, field))

    column.__name__ = f"{field}_moment"
    return column
