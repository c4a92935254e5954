"""The operations console in a real browser with a real worker: an operator opens the
dashboard, finds a dead job through the filter, edits its arguments and replays it, watches
it succeed once the worker has run it, replays the rest of the dead jobs through the
confirmation page, and pauses a queue, after which the worker takes nothing from it.

Screenshots of each page go to $SCREENSHOT_DIR/console-*.png when that is set, else to the
test's temporary folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Job
from jobs.states import State
from tests.support import factories
from tests.support.workers import running_worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.process, pytest.mark.django_db(transaction=True)]


def screens(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_an_operator_repairs_a_dead_job_and_pauses_a_queue(admin_page, live_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = screens(tmp_path)
    page = admin_page
    page.set_viewport_size({"width": 1366, "height": 768})
    broken = factories.job(State.DEAD, task_path="tests.tasks.basic.add", args=[1, "two"], max_attempts=1)
    error = factories.error_entry(1, at=timezone.now(), worker=broken.worker_ids[0],
                                  message="unsupported operand type(s) for +: 'int' and 'str'")  # fmt: skip
    error["exception"] = "builtins.TypeError"
    Job.objects.filter(id=broken.id).update(errors=[error], last_error=error["message"])
    others = [
        factories.job(State.DEAD, task_path="tests.tasks.basic.noop", queue_name="email") for _ in range(3)
    ]

    with running_worker(tmp_path, "--queues", "default,email", "--concurrency", "1"):
        # The dashboard: the queues, the worker, refreshed in place.
        page.goto(f"{live_server.url}/admin/jobs/job/dashboard/")
        expect(page.locator("#workers")).to_contain_text("default, email", timeout=15_000)
        expect(page.locator("#queues tr[data-queue='email']")).to_contain_text("3")
        first_refresh = page.locator("#dashboard").get_attribute("data-refreshed")
        page.wait_for_function(
            "(document.getElementById('dashboard').dataset.refreshed || null) !== "
            + json.dumps(first_refresh),
            timeout=15_000,
        )

        # The dead job, through the filter.
        page.goto(f"{live_server.url}/admin/jobs/job/?state=dead&task=tests.tasks.basic.add")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("TypeError")
        page.goto(f"{live_server.url}/admin/jobs/job/?state=dead")
        page.screenshot(path=str(shots / "console-list.png"), full_page=True)
        page.click(f"#result_list a[href*='{broken.id}']")
        # A built-in exception is named as its traceback names it (no "builtins.").
        expect(page.locator(".field-attempt_history")).to_contain_text("TypeError")
        page.screenshot(path=str(shots / "console-detail.png"), full_page=True)

        # Edit its arguments and replay it: the worker runs it to success.
        page.click("text=Edit arguments and replay")
        page.fill("#id_args", '[1, "x"')
        page.click("input[type=submit]")
        expect(page.locator(".errorlist")).to_contain_text("args is not valid JSON")
        assert Job.objects.get(id=broken.id).state == State.DEAD
        page.fill("#id_args", "[1, 2]")
        page.click("input[type=submit]")
        expect(page.locator(".messagelist")).to_contain_text("with the new arguments")
        wait_until(lambda: Job.objects.get(id=broken.id).state == State.SUCCEEDED, timeout=20,
                   message="the edited job to succeed")  # fmt: skip
        page.reload()
        expect(page.locator(".field-state_shown")).to_contain_text("succeeded")
        expect(page.locator(".field-result_pretty")).to_contain_text("3")
        expect(page.locator(".field-payload_history")).to_contain_text('"two"')

        # Pause the email queue from the dashboard, then replay its dead jobs in bulk.
        page.goto(f"{live_server.url}/admin/jobs/job/dashboard/")
        page.click("#queues tr[data-queue='email'] button.queue-pause")
        expect(page.locator("#queues tr[data-queue='email']")).to_contain_text("paused")
        page.goto(f"{live_server.url}/admin/jobs/job/?state=dead")
        page.check("#action-toggle")
        page.select_option("select[name=action]", "replay_jobs")
        page.click("button[name=index]")
        expect(page.locator("h1")).to_have_text("Replay 3 jobs?")
        expect(page.locator(".job-confirm-count")).to_have_text("Replay these 3 jobs.")
        page.screenshot(path=str(shots / "console-confirm.png"), full_page=True)
        page.click("input[type=submit]")
        expect(page.locator(".messagelist")).to_contain_text("Replayed 3 jobs.")

        # The worker takes nothing from the paused queue while it keeps serving the other.
        ok = factories.job(State.QUEUED, task_path="tests.tasks.basic.noop")
        wait_until(lambda: Job.objects.get(id=ok.id).state == State.SUCCEEDED, timeout=20,
                   message="the default queue to keep flowing")  # fmt: skip
        assert all(Job.objects.get(id=job.id).state == State.QUEUED for job in others)
        page.goto(f"{live_server.url}/admin/jobs/job/dashboard/")
        page.click("#queues tr[data-queue='email'] button.queue-resume")
        wait_until(lambda: all(Job.objects.get(id=job.id).state == State.SUCCEEDED for job in others),
                   timeout=20, message="the resumed queue to drain")  # fmt: skip
        page.goto(f"{live_server.url}/admin/jobs/job/dashboard/")
        expect(page.locator("#queues tr[data-queue='email']")).to_contain_text("active")
        page.screenshot(path=str(shots / "console-dashboard.png"), full_page=True)
