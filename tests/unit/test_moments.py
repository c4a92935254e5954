"""One way of writing moments across the console (jobs/console/moments.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from django.test import override_settings

from jobs.console.moments import deadline, moment, moment_html

NOW = datetime(2026, 12, 7, 3, 28, tzinfo=UTC)


@override_settings(TIME_ZONE="UTC")
def test_a_moment_is_day_month_and_time_with_the_year_only_when_it_is_not_this_year() -> None:
    assert moment(datetime(2026, 12, 7, 14, 3, 27, tzinfo=UTC), now=NOW) == "7 Dec 14:03"
    assert moment(datetime(2025, 11, 2, 9, 5, tzinfo=UTC), now=NOW) == "2 Nov 2025 09:05"
    assert moment(None, now=NOW) == "-"


def test_a_moment_is_written_in_the_zone_asked_for() -> None:
    jakarta = ZoneInfo("Asia/Jakarta")
    assert moment(datetime(2026, 12, 1, 2, 0, tzinfo=UTC), zone=jakarta, now=NOW) == "1 Dec 09:00"
    # New Year's Eve in UTC is already next year in Jakarta: the year is shown there.
    assert moment(datetime(2026, 12, 31, 20, 0, tzinfo=UTC), zone=jakarta, now=NOW) == "1 Jan 2027 03:00"


@override_settings(TIME_ZONE="UTC")
def test_a_deadline_says_when_it_is_tomorrow() -> None:
    assert deadline(datetime(2026, 12, 8, 1, 39, tzinfo=UTC), now=NOW) == "tomorrow 01:39"
    assert deadline(datetime(2026, 12, 7, 23, 0, tzinfo=UTC), now=NOW) == "today 23:00"
    assert deadline(datetime(2026, 12, 6, 23, 10, tzinfo=UTC), now=NOW) == "yesterday 23:10"
    assert deadline(datetime(2026, 12, 12, 1, 39, tzinfo=UTC), now=NOW) == "12 Dec 01:39"


@override_settings(TIME_ZONE="Europe/Berlin")
def test_the_html_form_carries_the_exact_instant_in_utc_as_its_tooltip() -> None:
    year = datetime.now(UTC).year
    shown = moment_html(datetime(year, 3, 9, 14, 3, 27, tzinfo=UTC))
    assert f'title="{year}-03-09 14:03:27 UTC"' in shown
    assert ">9 Mar 15:03</time>" in shown
