"""The schedule console pages, through Django's test client."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, strip_tags

from jobs.console.moments import moment
from jobs.models import FireRecord, Job, Schedule
from jobs.scheduler.declared import sync_declared
from tests.integration.test_scheduler_support import BEAT, make_schedule, utc

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:jobs_schedule_changelist")
ADD = reverse("admin:jobs_schedule_add")


@pytest.fixture
def admin_client(client: Client, django_user_model) -> Client:
    """A logged-in superuser, without the cost of hashing a password."""
    client.force_login(
        django_user_model.objects.create(username="operator", is_staff=True, is_superuser=True)
    )
    return client


def change_url(schedule: Schedule) -> str:
    return reverse("admin:jobs_schedule_change", args=[schedule.pk])


def form_data(**overrides: str) -> dict[str, str]:
    data = {
        "name": "nightly-report",
        "task_path": BEAT,
        "args": "[]",
        "kwargs": '{"label": "nightly"}',
        "enabled": "on",
        "cron": "30 1 * * *",
        "interval_seconds": "",
        "time_zone": "Asia/Jakarta",
        "queue_name": "default",
        "priority": "0",
        "catchup": "skip",
        "catchup_window": "3600",
        "overlap": "allow",
    }
    data.update(overrides)
    return data


def test_the_list_shows_next_fire_times_in_each_schedules_zone(admin_client: Client) -> None:
    schedule = make_schedule("jakarta", cron="0 9 * * *", time_zone="Asia/Jakarta")
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=utc("2026-12-01T02:00:00"))
    page = admin_client.get(CHANGELIST).content.decode()
    assert "jakarta" in page
    # In the schedule's zone, written as every moment in the console is.
    assert f"{moment(utc('2026-12-01T02:00:00'), zone=ZoneInfo('Asia/Jakarta'))} WIB" in page


def test_the_change_page_previews_the_next_five_fire_times(admin_client: Client) -> None:
    schedule = make_schedule("preview", cron="30 1 * * *", time_zone="America/New_York")
    page = admin_client.get(change_url(schedule)).content.decode()
    assert page.count(" 01:30 E") == 5
    now = timezone.now()
    later = {f"{moment(now + timedelta(days=n))[:6].strip()} " for n in (4, 5)}
    assert any(f"<div>{day}" in page for day in later)


def test_a_valid_schedule_is_saved_with_its_next_fire_time(admin_client: Client) -> None:
    response = admin_client.post(ADD, form_data())
    assert response.status_code == 302
    saved = Schedule.objects.get(name="nightly-report")
    assert saved.next_fire_at is not None and saved.next_fire_at > timezone.now()
    assert saved.kwargs == {"label": "nightly"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cron": "30 25 * * *"}, "invalid cron expression"),
        ({"cron": "", "interval_seconds": ""}, "Enter a cron expression or an interval in seconds"),
        ({"interval_seconds": "60"}, "Enter a cron expression or an interval in seconds"),
        ({"time_zone": "Asia/Atlantis"}, "unknown time zone"),
        ({"task_path": "tests.tasks.scheduled.nothing_here"}, "cannot be imported"),
        ({"task_path": "tests.tasks.scheduled.not_a_task"}, "is not a task"),
        ({"args": '{"a": 1}'}, "args must be a JSON list"),
        ({"args": "[1, 2"}, "The arguments are not valid JSON"),
        ({"kwargs": '{"unknown": 1}'}, "do not fit"),
        ({"queue_name": "nowhere"}, "unknown queue"),
        ({"priority": "500"}, "priority must be a whole number from -100 to 100"),
    ],
)
def test_invalid_input_is_shown_on_the_form(
    admin_client: Client, overrides: dict[str, str], message: str
) -> None:
    response = admin_client.post(ADD, form_data(**overrides))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Schedule.objects.filter(name="nightly-report").exists()


def errors_on(page: str) -> list[str]:
    """The error messages a person reads on the form, in order."""
    lists = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', page, re.S)
    return [
        unescape(strip_tags(item)) for block in lists for item in re.findall(r"<li>(.*?)</li>", block, re.S)
    ]


ARGS_NOT_JSON = 'The arguments are not valid JSON. Enter a JSON list, such as [42, "weekly"], or [] for none.'
KWARGS_NOT_JSON = (
    "The keyword arguments are not valid JSON. Enter a JSON object, such as "
    '{"label": "nightly"}, or {} for none.'
)


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        # Neither: said as such, once, without the database constraint's name.
        ({"cron": "", "interval_seconds": ""},
         ["Enter a cron expression or an interval in seconds: the schedule has neither."]),
        ({"interval_seconds": "60"},
         ["Enter a cron expression or an interval in seconds, not both: clear one of them."]),
        # Bad JSON is only that: not also "missing a required argument" about what was not read.
        ({"task_path": "tests.tasks.scheduled.for_user", "args": "[1, 2", "kwargs": "{}"}, [ARGS_NOT_JSON]),
        ({"task_path": "tests.tasks.scheduled.for_user", "args": "[]", "kwargs": '{"user_id": 1'},
         [KWARGS_NOT_JSON]),
        # The field count the help text gives, not croniter's "5, 6 or 7 columns".
        ({"cron": "* * *"},
         ["invalid cron expression '* * *': it has 3 fields; use five (minute hour day month weekday), "
          "or six with seconds last"]),
        ({"cron": "0 0 * * * * *"},
         ["invalid cron expression '0 0 * * * * *': it has 7 fields; use five (minute hour day month "
          "weekday), or six with seconds last"]),
    ],
)  # fmt: skip
def test_each_mistake_on_the_form_is_said_once_in_plain_words_and_what_was_typed_stays(
    admin_client: Client, overrides: dict[str, str], errors: list[str]
) -> None:
    response = admin_client.post(ADD, form_data(**overrides))
    assert response.status_code == 200
    page = response.content.decode()
    assert errors_on(page) == errors
    assert "jobs_schedule_" not in page
    for name, typed in overrides.items():
        if typed:
            assert f"{escape(typed)}</textarea>" in page or f'value="{escape(typed)}"' in page, name
    assert not Schedule.objects.filter(name="nightly-report").exists()


def test_enable_disable_and_run_now_actions(admin_client: Client) -> None:
    schedule = make_schedule("acted-on", cron="0 3 * * *")
    admin_client.post(CHANGELIST, {"action": "disable_schedules", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert not schedule.enabled
    admin_client.post(CHANGELIST, {"action": "enable_schedules", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert schedule.enabled and schedule.next_fire_at is not None

    response = admin_client.post(
        CHANGELIST, {"action": "run_schedules_now", "_selected_action": [schedule.pk]}, follow=True
    )
    record = FireRecord.objects.get(schedule=schedule)
    assert record.manual and record.job_id is not None
    assert Job.objects.filter(id=record.job_id, task_path=BEAT).exists()
    assert f"enqueued job {record.job_id}" in response.content.decode()


def test_run_now_refuses_an_invalid_schedule_with_the_reason(admin_client: Client) -> None:
    schedule = make_schedule("broken", queue_name="nowhere")
    response = admin_client.post(
        CHANGELIST, {"action": "run_schedules_now", "_selected_action": [schedule.pk]}, follow=True
    )
    assert (
        "Schedule broken not run: queue_name: unknown queue &#x27;nowhere&#x27;" in response.content.decode()
    )
    assert Job.objects.count() == 0


def test_code_declared_schedules_only_let_the_console_change_enabled(admin_client: Client) -> None:
    sync_declared()
    prune = Schedule.objects.get(name="jobs.prune_jobs")
    page = admin_client.get(change_url(prune)).content.decode()
    assert 'name="enabled"' in page
    assert 'name="cron"' not in page and 'name="task_path"' not in page
    assert reverse("admin:jobs_schedule_delete", args=[prune.pk]) not in page

    data = form_data(cron="* * * * *", task_path="tests.tasks.scheduled.for_user")
    data.pop("enabled")
    admin_client.post(change_url(prune), data)
    prune.refresh_from_db()
    assert (prune.enabled, prune.cron, prune.task_path) == (False, "17 3 * * *", "jobs.tasks.prune_jobs")


def test_the_list_shows_why_a_schedule_is_skipped(admin_client: Client) -> None:
    make_schedule("fine", cron="0 3 * * *")
    broken = make_schedule("stale-task", cron="0 3 * * *")
    Schedule.objects.filter(pk=broken.pk).update(task_path="tests.tasks.scheduled.removed_in_a_deploy")
    page = admin_client.get(CHANGELIST).content.decode()
    assert "task_path: task &#x27;tests.tasks.scheduled.removed_in_a_deploy&#x27; cannot be imported" in page


def test_the_fire_history_tells_two_slots_at_one_instant_apart(admin_client: Client) -> None:
    # New York, 2026-03-08: 02:00 is skipped and fires at 03:00 EDT, as does 03:00 itself.
    schedule = make_schedule("gap", cron="0 2,3 * * *", time_zone="America/New_York")
    change = utc("2026-03-08T07:00:00")
    for seq in (0, 1):
        FireRecord.objects.create(schedule=schedule, slot=change, slot_seq=seq)
    page = admin_client.get(change_url(schedule)).content.decode()
    # The same wall-clock time twice, told apart by the note (and shown with its offset).
    shown = moment(change, zone=ZoneInfo("America/New_York"))
    assert shown.endswith("03:00")
    assert page.count(f"{shown} EDT (UTC-0400)") == 2
    assert page.count("(second slot at this instant)") == 1
