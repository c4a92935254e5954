"""The console in a real browser: schedules (validation errors on the form, the preview of
the next fire times) and jobs (a dead job's error, replay)."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Job, Schedule
from jobs.states import State
from tests.support import factories

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_bad_cron_expression_is_shown_on_the_form_and_nothing_is_saved(admin_page, live_server) -> None:  # type: ignore[no-untyped-def]
    page = admin_page
    page.goto(f"{live_server.url}/admin/jobs/schedule/add/")
    page.fill("#id_name", "nightly report")
    page.fill("#id_task_path", "tests.tasks.basic.noop")
    page.fill("#id_cron", "61 25 * * *")
    page.click("input[name=_save]")
    expect(page.locator(".field-cron .errorlist")).to_contain_text("invalid cron expression")
    assert not Schedule.objects.filter(name="nightly report").exists()

    page.fill("#id_cron", "30 1 * * *")
    page.fill("#id_time_zone", "Asia/Jakarta")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    schedule = Schedule.objects.get(name="nightly report")
    assert schedule.cron == "30 1 * * *"
    # The change page previews the next five fire times in the schedule's zone.
    expect(page.locator(".field-next_five")).to_contain_text("01:30")
    assert page.locator(".field-next_five").inner_text().count("01:30") == 5


def test_a_dead_job_shows_its_error_and_can_be_replayed(admin_page, live_server) -> None:  # type: ignore[no-untyped-def]
    page = admin_page
    dead = factories.job(State.DEAD, task_path="tests.tasks.basic.fail_always", max_attempts=1)
    error = factories.error_entry(
        1, at=timezone.now(), worker=dead.worker_ids[0], message="mail server said 550"
    )
    Job.objects.filter(id=dead.id).update(errors=[error], last_error=error["message"])
    result_id = str(dead.id)
    page.goto(f"{live_server.url}/admin/jobs/job/?state=dead")
    assert "tests.tasks.basic.fail_always" in page.locator("#result_list").inner_text()
    page.click(f"#result_list a[href*='{result_id}']")
    history = page.locator(".field-attempt_history")
    expect(history).to_contain_text("RuntimeError: mail server said 550")
    expect(history).to_contain_text("Traceback (most recent call last)")

    page.goto(f"{live_server.url}/admin/jobs/job/?state=dead")
    page.check(f"input[name=_selected_action][value='{result_id}']")
    page.select_option("select[name=action]", "replay_jobs")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("Replayed 1 job.")
    assert Job.objects.get(id=result_id).state == State.QUEUED
