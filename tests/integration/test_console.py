"""The operations console through Django's test client: the job list's filters and search,
the detail page, the actions with their permissions, CSRF and admin log, edit-and-replay,
bulk actions with their confirmation, queue pause, and the dashboard."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from jobs import stats, store
from jobs.models import Job, PausedQueue
from jobs.states import State
from tests.support import factories

pytestmark = pytest.mark.django_db

LIST = reverse("admin:jobs_job_changelist")
DASHBOARD = reverse("admin:jobs_job_dashboard")


@pytest.fixture
def admin_client(client: Client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create(username="ops", is_staff=True, is_superuser=True))
    return client


def staff_with(django_user_model, *codenames: str) -> Client:
    """A staff user holding only the given jobs permissions (and view_job)."""
    user = django_user_model.objects.create(username=f"staff-{uuid.uuid4().hex[:6]}", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="jobs",
                                                        codename__in=["view_job", *codenames]))  # fmt: skip
    client = Client()
    client.force_login(user)
    return client


def detail(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def operate(job: Job, operation: str) -> str:
    return reverse("admin:jobs_job_operate", args=[job.pk, operation])


def listed(client: Client, query: str = "") -> str:
    """The list's rows (not the filters beside them) and its count."""
    response = client.get(LIST + query)
    assert response.status_code == 200, response.content[:2000]
    page = response.content.decode()
    start = page.find('<table id="result_list"')
    rows = page[start : page.find("</table>", start)] if start >= 0 else ""
    count = page[page.find('<span class="job-count">') :]
    return rows + count[: count.find("</span>")]


# --- the list --------------------------------------------------------------------------


def test_each_state_filter_shows_the_jobs_an_operator_means(admin_client: Client) -> None:
    due = factories.job(State.QUEUED, task_path="tests.tasks.basic.due")
    later = factories.job(State.SCHEDULED, task_path="tests.tasks.basic.later")
    retry = factories.job(State.SCHEDULED, attempt=1, task_path="tests.tasks.basic.again")
    running = factories.job(State.RUNNING, task_path="tests.tasks.basic.busy")
    dead = factories.job(State.DEAD, task_path="tests.tasks.basic.broken")
    everyone = {due, later, retry, running, dead}
    for state, expected in {"queued": due, "scheduled": later, "retrying": retry, "running": running,
                            "dead": dead}.items():  # fmt: skip
        page = listed(admin_client, f"?state={state}")
        assert expected.task_path in page, state
        for other in everyone - {expected}:
            assert other.task_path not in page, (state, other.task_path)


def test_rows_show_a_short_id_the_error_class_and_first_line_and_compact_times(
    admin_client: Client,
) -> None:
    job = factories.job(State.DEAD, max_attempts=1)
    error = factories.error_entry(1, at=timezone.now(), worker=job.worker_ids[0],
                                  message="SMTP said 550\nsecond line stays out")  # fmt: skip
    Job.objects.filter(id=job.id).update(errors=[error], last_error=error["message"])
    page = listed(admin_client, "?state=dead")
    assert job.id.hex[-8:] in page
    assert "<strong>RuntimeError</strong> SMTP said 550" in page
    # "7 Dec 14:03" in the cell, the instant to the second as its tooltip.
    created = timezone.localtime(job.created_at)
    assert f">{created.day} {created:%b %H:%M}</time>" in page
    assert f'title="{job.created_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"' in page
    # The count comes from the aggregates, not from COUNT(*), and is said in plain words.
    assert '<span class="job-count">1 job' in page
    assert "queue counts" not in page


def test_queue_task_time_and_search_filters(admin_client: Client) -> None:
    mail = factories.job(State.DEAD, queue_name="email", task_path="tests.tasks.basic.mail",
                         dedupe_key="welcome:42", trace_id="trace-abc")  # fmt: skip
    Job.objects.filter(id=mail.id).update(last_error="ConnectionRefused: smtp.example.com:25")
    other = factories.job(State.SUCCEEDED, task_path="tests.tasks.basic.other")
    old = factories.job(State.SUCCEEDED, task_path="tests.tasks.basic.ancient")
    Job.objects.filter(id=old.id).update(id=uuid.UUID(int=(1 << 76) | 7))  # a 1970 id: outside any range

    assert "tests.tasks.basic.mail" in listed(admin_client, "?queue=email")
    assert "tests.tasks.basic.other" not in listed(admin_client, "?queue=email")
    assert "tests.tasks.basic.other" in listed(admin_client, "?task=tests.tasks.basic.other")
    assert "tests.tasks.basic.mail" not in listed(admin_client, "?task=tests.tasks.basic.other")
    recent = listed(admin_client, "?created=1h")
    assert "tests.tasks.basic.other" in recent and "tests.tasks.basic.ancient" not in recent
    for term in [str(mail.id), "welcome:42", "trace-abc", "smtp.example", "connectionrefused"]:
        page = listed(admin_client, f"?q={term}")
        assert "tests.tasks.basic.mail" in page, term
        assert "tests.tasks.basic.other" not in page, term
    # A search is counted by the planner, and says so.
    assert "(estimated)" in listed(admin_client, "?q=welcome:42")
    # Wildcards in a search are text, not patterns.
    assert "tests.tasks.basic.mail" not in listed(admin_client, "?q=%25%25%25")
    assert other.task_path in listed(admin_client)


def test_a_job_waiting_on_a_limit_says_which(admin_client: Client) -> None:
    job = factories.job(State.SCHEDULED, limit_name="resend", limit_wait="rate", limit_reserved=True)
    assert "waiting on limit resend (rate)" in listed(admin_client)
    waiting = factories.job(State.SCHEDULED, limit_name="reports", limit_wait="concurrency")
    assert "waiting on limit reports (concurrency)" in admin_client.get(detail(waiting)).content.decode()
    assert job.id


def test_paused_queues_are_marked_in_the_list_and_the_filter(admin_client: Client) -> None:
    factories.job(State.QUEUED, queue_name="email")
    store.pause_queue("email")
    assert "email (paused)" in listed(admin_client)
    assert "email (paused)</a>" in admin_client.get(LIST).content.decode()  # the queue filter


# --- the detail page -------------------------------------------------------------------


def test_the_detail_page_escapes_the_payload_and_shows_each_attempt(admin_client: Client) -> None:
    job = factories.job(State.DEAD, max_attempts=2, args=["<script>alert(1)</script>"],
                        kwargs={"html": "<b>x</b>"})  # fmt: skip
    page = admin_client.get(detail(job)).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page
    assert page.count("Traceback (most recent call last)") == 2
    # Replay and edit are offered; a finished job may be deleted.
    assert "Replay</button>" in page and "Edit arguments and replay" in page
    assert reverse("admin:jobs_job_delete", args=[job.pk]) in page


def test_an_unfinished_job_has_no_delete_button_and_cannot_be_deleted(admin_client: Client) -> None:
    job = factories.job(State.QUEUED)
    page = admin_client.get(detail(job)).content.decode()
    assert reverse("admin:jobs_job_delete", args=[job.pk]) not in page
    assert "Cancel</button>" in page and "Run now</button>" in page
    assert (
        admin_client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"}).status_code == 403
    )
    assert Job.objects.filter(id=job.id).exists()


def test_the_detail_page_links_the_schedule_that_fired_the_job(admin_client: Client) -> None:
    from jobs.models import FireRecord
    from tests.integration.test_scheduler_support import make_schedule

    schedule = make_schedule("nightly", cron="0 3 * * *")
    job = factories.job(State.SUCCEEDED)
    FireRecord.objects.create(schedule=schedule, slot=timezone.now(), job_id=job.id)
    page = admin_client.get(detail(job)).content.decode()
    assert reverse("admin:jobs_schedule_change", args=[schedule.pk]) in page


# --- actions: permissions, CSRF, admin log --------------------------------------------


def test_replay_from_the_detail_page_is_logged(admin_client: Client) -> None:
    job = factories.job(State.DEAD)
    response = admin_client.post(operate(job, "replay"))
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.state, job.attempt) == (State.QUEUED, 0)
    entry = LogEntry.objects.get(object_id=str(job.id))
    assert "Replayed: dead -> queued" in entry.get_change_message()


def test_a_staff_user_without_the_permission_cannot_replay(django_user_model) -> None:
    job = factories.job(State.DEAD)
    viewer = staff_with(django_user_model)
    assert viewer.get(detail(job)).status_code == 200
    assert "Replay</button>" not in viewer.get(detail(job)).content.decode()
    assert viewer.post(operate(job, "replay")).status_code == 403
    # Nor through the list's action: it is not even offered.
    viewer.post(LIST, {"action": "replay_jobs", "_selected_action": [str(job.id)], "index": "0"})
    assert Job.objects.get(id=job.id).state == State.DEAD
    assert not LogEntry.objects.exists()
    # With it, they can.
    replayer = staff_with(django_user_model, "replay_job")
    assert replayer.post(operate(job, "replay")).status_code == 302
    assert Job.objects.get(id=job.id).state == State.QUEUED


def test_actions_need_a_csrf_token(django_user_model) -> None:
    job = factories.job(State.DEAD)
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create(username="csrf", is_staff=True, is_superuser=True))
    assert client.post(operate(job, "replay")).status_code == 403
    assert client.post(reverse("admin:jobs_job_queue_operate", args=["default", "pause"])).status_code == 403
    assert Job.objects.get(id=job.id).state == State.DEAD
    assert not PausedQueue.objects.exists()
    # And they refuse GET.
    assert client.get(operate(job, "replay")).status_code == 405


def test_a_running_job_cancelled_from_the_console_is_not_replayed_before_its_attempt_ends(
    admin_client: Client,
) -> None:
    job = factories.job(State.RUNNING)
    admin_client.post(operate(job, "cancel"))
    job.refresh_from_db()
    # A request: the job runs on under its lease until its attempt ends.
    assert job.state == State.RUNNING and job.cancel_requested_at is not None
    assert job.lease_expires_at > timezone.now()
    admin_client.post(operate(job, "replay"), follow=True)
    assert Job.objects.get(id=job.id).state == State.RUNNING
    # Its lease ran out: the reaper ends it cancelled, and then it may be replayed.
    with connection.cursor() as cursor:
        store.reap(cursor, backoff_base=1, backoff_cap=2, now=job.lease_expires_at + timedelta(seconds=5))
    assert Job.objects.get(id=job.id).state == State.CANCELLED
    admin_client.post(operate(job, "replay"))
    assert Job.objects.get(id=job.id).state == State.QUEUED


def test_replay_takes_the_dedupe_key_back_unless_another_job_holds_it(admin_client: Client) -> None:
    first = factories.job(State.DEAD, dedupe_key="invoice:7")
    store.replay(first.id)
    assert Job.objects.get(id=first.id).dedupe_lapsed is False
    second = factories.job(State.DEAD, dedupe_key="invoice:7")
    store.replay(second.id)
    assert Job.objects.get(id=second.id).state == State.QUEUED
    assert Job.objects.get(id=second.id).dedupe_lapsed is True


def test_run_now_and_cancel_from_the_detail_page(admin_client: Client) -> None:
    later = factories.job(State.SCHEDULED, run_at=timezone.now() + timedelta(hours=1))
    admin_client.post(operate(later, "run-now"))
    assert Job.objects.get(id=later.id).state == State.QUEUED
    admin_client.post(operate(later, "cancel"))
    assert Job.objects.get(id=later.id).state == State.CANCELLED
    assert LogEntry.objects.filter(object_id=str(later.id)).count() == 2
    response = admin_client.post(operate(later, "run-now"), follow=True)
    assert "is cancelled" in response.content.decode()


# --- edit and replay -------------------------------------------------------------------


def edit_url(job: Job) -> str:
    return reverse("admin:jobs_job_edit_replay", args=[job.pk])


def test_a_dead_jobs_arguments_are_edited_and_replayed_with_the_old_payload_kept(
    admin_client: Client,
) -> None:
    job = factories.job(State.DEAD, task_path="tests.tasks.basic.add", args=[1, 2])
    form = admin_client.get(edit_url(job)).content.decode()
    assert "[\n  1,\n  2\n]" in form
    response = admin_client.post(edit_url(job), {"args": "[40, 2]", "kwargs": "{}"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.state, job.args) == (State.QUEUED, [40, 2])
    assert job.edits[0]["args"] == [1, 2] and job.edits[0]["by"] == "ops"
    assert "was args=[1, 2]" in LogEntry.objects.get(object_id=str(job.id)).get_change_message()
    assert "Replaced at" in admin_client.get(detail(job)).content.decode()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ("[1, 2", "{}", "args is not valid JSON"),
        ('{"a": 1}', "{}", "args must be a JSON list"),
        ("[1]", "{}", "missing a required argument"),
        ("[1, 2, 3]", "{}", "too many positional arguments"),
        ("[1, 2]", '{"nope": 1}', "unexpected keyword argument"),
    ],
)
def test_an_edited_payload_that_fails_validation_is_refused_and_nothing_changes(
    admin_client: Client, args: str, kwargs: str, message: str
) -> None:
    job = factories.job(State.DEAD, task_path="tests.tasks.basic.add", args=[1, 2])
    before = factories.row(job.id)
    response = admin_client.post(edit_url(job), {"args": args, "kwargs": kwargs})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert factories.row(job.id) == before
    assert not LogEntry.objects.exists()


def test_editing_needs_its_own_permission(django_user_model) -> None:
    job = factories.job(State.DEAD, task_path="tests.tasks.basic.add", args=[1, 2])
    replayer = staff_with(django_user_model, "replay_job")
    assert replayer.get(edit_url(job)).status_code == 403
    assert replayer.post(edit_url(job), {"args": "[3, 4]", "kwargs": "{}"}).status_code == 403
    assert Job.objects.get(id=job.id).args == [1, 2]


# --- bulk actions ----------------------------------------------------------------------


def test_replaying_everything_matching_the_filter_is_confirmed_with_the_count_and_capped(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.console import actions as console_actions

    monkeypatch.setattr(console_actions, "BULK_CAP", 5)
    factories.insert_finished(7, state=State.DEAD)
    factories.insert_finished(3, state=State.SUCCEEDED)
    one = Job.objects.filter(state=State.DEAD).first()
    data = {"action": "replay_jobs", "_selected_action": [str(one.id)], "select_across": "1", "index": "0"}
    confirm = admin_client.post(LIST + "?state=dead", data)
    page = confirm.content.decode()
    assert "Replay 5 jobs" in page and "more than 5 match" in page
    assert Job.objects.filter(state=State.DEAD).count() == 7  # nothing yet
    data.pop("index")
    admin_client.post(LIST + "?state=dead", {**data, "confirmed": "yes"})
    assert Job.objects.filter(state=State.QUEUED).count() == 5
    assert Job.objects.filter(state=State.DEAD).count() == 2
    assert LogEntry.objects.count() == 5


def test_discard_deletes_only_finished_jobs_and_logs_each(admin_client: Client) -> None:
    done = factories.job(State.SUCCEEDED)
    dead = factories.job(State.DEAD)
    waiting = factories.job(State.QUEUED)
    ids = [str(done.id), str(dead.id), str(waiting.id)]
    page = admin_client.post(LIST, {"action": "discard_jobs", "_selected_action": ids, "index": "0"})
    assert "Discard 2 jobs" in page.content.decode()
    admin_client.post(LIST, {"action": "discard_jobs", "_selected_action": ids, "confirmed": "yes"})
    assert list(Job.objects.values_list("id", flat=True)) == [waiting.id]
    assert LogEntry.objects.filter(action_flag=3).count() == 2


def test_bulk_actions_need_their_permission(django_user_model) -> None:
    job = factories.job(State.SUCCEEDED)
    viewer = staff_with(django_user_model, "replay_job")
    viewer.post(LIST, {"action": "discard_jobs", "_selected_action": [str(job.id)], "index": "0"})
    assert Job.objects.filter(id=job.id).exists()


# --- queues ----------------------------------------------------------------------------


def test_pausing_a_queue_stops_the_claim_and_resuming_restarts_it(admin_client: Client) -> None:
    factories.insert_queued(3, queue_name="email")
    factories.insert_queued(2)
    admin_client.post(reverse("admin:jobs_job_queue_operate", args=["email", "pause"]))
    assert PausedQueue.objects.filter(name="email").exists()
    outcomes = factories.run_due(queues=("email", "default"))
    assert len(outcomes) == 2
    assert Job.objects.filter(queue_name="email", state=State.QUEUED).count() == 3
    assert stats.queue_stats()["queues"]["email"]["paused"] is True
    admin_client.post(reverse("admin:jobs_job_queue_operate", args=["email", "resume"]))
    assert len(factories.run_due(queues=("email", "default"))) == 3
    messages = [e.get_change_message() for e in LogEntry.objects.order_by("id")]
    assert messages == ["Paused queue 'email'", "Resumed queue 'email'"]


def test_pausing_needs_its_permission(django_user_model) -> None:
    viewer = staff_with(django_user_model, "replay_job")
    assert viewer.post(reverse("admin:jobs_job_queue_operate", args=["email", "pause"])).status_code == 403
    assert not PausedQueue.objects.exists()


# --- the dashboard ---------------------------------------------------------------------


def test_the_dashboard_shows_counts_throughput_workers_and_failing_tasks(admin_client: Client) -> None:
    factories.insert_queued(4, queue_name="email")
    factories.job(State.DEAD, queue_name="email")
    factories.job(State.QUEUED, task_path="tests.tasks.basic.fail_always", max_attempts=1)
    factories.job(State.QUEUED)
    factories.job(State.QUEUED)
    factories.run_due()
    page = admin_client.get(DASHBOARD).content.decode()
    assert '<td><a href="/admin/jobs/job/?queue=email">email</a></td>' in page
    assert "Last hour: 2 succeeded, 1 failed" in page
    assert "tests.tasks.basic.fail_always" in page
    assert "<svg class='chart'" in page and "max 3 per minute" in page
    body = admin_client.get(DASHBOARD + "?part=body").content.decode()
    assert "<html" not in body and "Queues" in body


def test_the_dashboard_needs_the_view_permission(django_user_model) -> None:
    user = django_user_model.objects.create(username="nobody", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(DASHBOARD).status_code == 403


def test_throughput_counts_each_ended_attempt_once() -> None:
    from jobs import stats as job_stats

    def totals() -> tuple[int, int]:
        series = job_stats.throughput(since=timedelta(hours=1))
        return sum(ok for _, ok, _ in series), sum(bad for _, _, bad in series)

    factories.job(State.QUEUED, task_path="tests.tasks.basic.fail_always", max_attempts=2)
    factories.job(State.QUEUED)
    factories.run_due()
    assert totals() == (1, 1)  # one success, one failed attempt now waiting for its retry
    later = timezone.now() + timedelta(minutes=5)
    factories.run_due(now=later)  # its retry comes due (no new failure) and fails for good
    assert totals() == (1, 2)
    [top] = job_stats.top_failing(since=timedelta(hours=1))
    assert (top["task"], top["failures"], top["last_error"]) == ("tests.tasks.basic.fail_always", 2, "boom")
    job_stats.compact()
    assert totals() == (1, 2)


def test_a_pending_cancel_is_shown_until_the_attempt_ends(admin_client: Client) -> None:
    job = factories.job(State.RUNNING)
    store.cancel(job.id)
    assert "running, cancel pending" in admin_client.get("/admin/jobs/job/").content.decode()
    assert "running, cancel pending" in admin_client.get(f"/admin/jobs/job/{job.id}/change/").content.decode()
