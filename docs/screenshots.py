"""Make the documentation's screenshots (docs/images/*.png) from a populated test database.

    DATABASE_URL=... .venv/bin/python -m pytest -p no:cacheprovider docs/screenshots.py

Headless Chromium (Debian's package) through Playwright, as the browser tests drive it.
Look at the images before committing them.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.models import Job
from tests.e2e.conftest import admin_page, browser  # noqa: F401 (fixtures)
from tests.support import factories

IMAGES = Path(__file__).resolve().parent / "images"
QUEUES = ("default", "email", "push", "low")

pytestmark = pytest.mark.django_db(transaction=True)


def populate() -> Job:
    """Jobs in most states, a schedule and a workflow; returns a dead job."""
    from demos.workflows import start_video_pipeline
    from tests.tasks.basic import add, fail_always, noop, snooze

    for n in range(12):
        add.enqueue(n, n + 1)
    dead = fail_always.enqueue("SMTP 451: mailbox busy, try again later")
    now = timezone.now()
    for _ in range(4):
        factories.run_due(now=now, queues=QUEUES)
        now += timedelta(hours=1)
    for _ in range(5):
        noop.using(queue_name="email").enqueue()
    snooze.using(run_after=timezone.now() + timedelta(hours=2)).enqueue(60)
    start_video_pipeline(video_id=7, user_id=1, title="Launch video")
    factories.run_due(queues=QUEUES)
    return Job.objects.get(id=dead.id)


def shoot(page, url: str, name: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(IMAGES / f"{name}.png"))


def test_console_screenshots(admin_page, live_server) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from jobs.scheduler import ScheduleSpec, declare
    from jobs.scheduler.declared import sync_declared

    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 760})
    dead = populate()
    declare(ScheduleSpec(name="shop.nightly-digest", task="tests.tasks.basic.noop", cron="0 6 * * *"))
    sync_declared()
    shoot(page, f"{live_server.url}/admin/jobs/job/", "console-jobs")
    shoot(page, f"{live_server.url}/admin/jobs/job/{dead.id}/change/", "console-job-dead")
    shoot(page, f"{live_server.url}/admin/jobs/job/dashboard/", "console-dashboard")
    shoot(page, f"{live_server.url}/admin/jobs/schedule/", "console-schedules")
    page.goto(f"{live_server.url}/admin/jobs/workflow/")
    page.click("#result_list tbody a >> nth=0")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(IMAGES / "console-workflow.png"))


def test_site_screenshots(browser, live_server) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    page = context.new_page()
    shoot(page, f"{live_server.url}/accounts/signup/", "signup")
    context.close()
