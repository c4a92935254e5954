"""Every page on a laptop screen (1366 x 768, the admin's sidebar open): each registered
ModelAdmin's change list, the jobs dashboard and the public pages, filled first with
long-ish realistic rows (long task paths, errors, addresses, user agents). None may scroll
sideways, and no change list's results table may overflow its box. Each page is
photographed into $SCREENSHOT_DIR when set (e.g. ``screenshots/``, gitignored), else into
the test's temporary folder, so a person can look at them."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken
from demos.workflows import start_payment_approval
from jobs.models import Job, Limit, Schedule, Worker
from jobs.states import State
from notifications.email.models import EmailDelivery
from notifications.push.models import Device, PushDelivery, PushNotification
from reports.models import Customer, Import
from tests.support import factories

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORT = {"width": 1366, "height": 768}
REPORT_TASK = "reports.tasks.build_quarterly_revenue_report_for_customer"
LONG_TASK = "notifications.email.tasks.send_transactional_email_with_attachments"
LONG_ERROR = (
    "SMTPRecipientsRefused: {'very.long.customer.address+newsletter@subdomain.example-company.co.uk': "
    "(550, b'5.1.1 The email account that you tried to reach does not exist. Please try double-checking "
    "the recipient address for typos or unnecessary spaces.')}"
)
AGENT = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.86"
)
PUBLIC = ("/", "/accounts/signup/", "/accounts/login/", "/accounts/password/reset/", "/imports/", "/reports/")


def populate() -> None:
    """Rows in every list, with values as long as real ones get."""
    now = timezone.now()
    user_model = get_user_model()
    ops = user_model.objects.get(username="ops")
    ann = user_model.objects.create_user(
        "annabelle.featherstonehaugh", "annabelle.featherstonehaugh@subdomain.example-company.co.uk", "x" * 20
    )
    for state in (State.QUEUED, State.SCHEDULED, State.RUNNING, State.SUCCEEDED, State.DEAD):
        job = factories.job(state, task_path=LONG_TASK, queue_name="transactional-email")
        if state == State.DEAD:
            Job.objects.filter(id=job.id).update(last_error=LONG_ERROR)
    factories.job(State.SCHEDULED, task_path=REPORT_TASK, attempt=1, run_at=now + timedelta(days=3),
                  limit_name="reports", limit_wait="concurrency")  # fmt: skip
    factories.job(State.QUEUED, task_path="tests.tasks.basic.fail_always", max_attempts=1,
                  kwargs={"message": LONG_ERROR})  # fmt: skip
    factories.job(State.QUEUED)
    factories.run_due()
    Worker.objects.create(
        hostname="jobs-worker-7f9c2d5b8-x2k4q.prod-eu-west-1.internal", pid=123456,
        queues="default:1,transactional-email:2,reports:1", concurrency=2, jobs_in_hand=3,
        started_at=now - timedelta(days=400),
    )  # fmt: skip
    Limit.objects.create(name=f"task:{REPORT_TASK}", concurrency=2)
    Schedule.objects.create(
        name="nightly revenue report for every enterprise customer",
        task_path=REPORT_TASK,
        cron="30 1 * * 1-5", time_zone="America/Argentina/Buenos_Aires",
    )  # fmt: skip
    Schedule.objects.create(
        name="prune finished jobs", task_path="jobs.tasks.prune_jobs", interval_seconds=3600
    )
    start_payment_approval(order_id=918273, amount_cents=129900)
    for n in range(3):
        EmailDelivery.objects.create(
            message_key=f"welcome:{n}:{uuid.uuid4()}", purpose="password_reset", template="password_reset",
            to_address=f"very.long.customer.address+{n}@subdomain.example-company.co.uk", status="failed",
            attempts=5, provider_message_id=f"<{uuid.uuid4()}@eu-west-1.amazonses.com>", error=LONG_ERROR,
        )  # fmt: skip
    device = Device.objects.create(
        user=ann, platform="ios", token="a" * 64, app_id="com.example-company.customer-app.enterprise",
        deactivation_reason="APNs answered 410 Unregistered: the token is no longer active for the topic",
    )  # fmt: skip
    note = PushNotification.objects.create(
        title="Your quarterly revenue report for Featherstonehaugh Holdings is ready to download",
        body="Tap to open it.", created_by=ops, audience="all users with the enterprise plan",
        expires_at=now + timedelta(days=2),
    )  # fmt: skip
    PushDelivery.objects.create(
        notification=note, device=device, user=ann, platform="ios", status="failed", http_status=410,
        reason="Unregistered: the device token is inactive for the specified topic", job_id=uuid.uuid4(),
    )  # fmt: skip
    for n in range(3):
        Customer.objects.create(
            owner=ann, name=f"Featherstonehaugh Holdings International {n}", phone="+44 20 7946 0958 x1234",
            email=f"accounts.payable.department.{n}@subdomain.example-company.co.uk", country="GB",
        )  # fmt: skip
    Import.objects.create(
        owner=ann, filename="customers-export-2025-12-07-enterprise-accounts-final-v2.csv", stored_name="x",
        size=123456, total_rows=12000, rows_done=6000, inserted=5000, updated=900, rejected=100,
    )  # fmt: skip
    ApiToken.objects.create(user=ann, name="reporting pipeline on the data warehouse", prefix="jq_1a2b3c4d")
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog

    seen = {"username": "annabelle.featherstonehaugh@subdomain.example-company.co.uk",
            "ip_address": "2001:db8::1", "user_agent": AGENT, "path_info": "/accounts/login/"}  # fmt: skip
    AccessAttempt.objects.create(**seen, failures_since_start=3)
    AccessLog.objects.create(**seen)
    AccessFailureLog.objects.create(**seen)


def overflow(page) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """How many pixels the page, and a change list's results box, are wider than they show."""
    return page.evaluate(
        """() => {
          const doc = document.documentElement;
          const results = document.querySelector('#changelist .results');
          return {
            page: doc.scrollWidth - doc.clientWidth,
            results: results ? results.scrollWidth - results.clientWidth : 0,
          };
        }"""
    )


def test_every_page_fits_a_laptop_screen(admin_page, live_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    populate()
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    page = admin_page
    page.set_viewport_size(VIEWPORT)
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")

    urls = {"dashboard": reverse("admin:jobs_job_dashboard")}
    for model in admin.site._registry:
        name = f"{model._meta.app_label}_{model._meta.model_name}"
        urls[name] = reverse(f"admin:{name}_changelist")
    urls.update({"public" + path.replace("/", "_").rstrip("_"): path for path in PUBLIC})

    too_wide = {}
    for name, url in urls.items():
        response = page.goto(f"{live_server.url}{url}")
        assert response is not None and response.ok, (name, response and response.status)
        if url.startswith("/admin/"):
            assert page.locator("#nav-sidebar").is_visible(), name
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
        wider = overflow(page)
        if wider["page"] > 0 or wider["results"] > 0:
            too_wide[name] = wider
    assert not too_wide, "pages wider than the screen: " + ", ".join(f"{k} {v}" for k, v in too_wide.items())
