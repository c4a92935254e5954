"""Development email in a real browser: a real runworker with EMAIL_URL=consolemail:// sends
the signup's email into the outbox folder; the staff page in the web process lists it with
its link, fits a laptop screen, and the link verifies the account."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from accounts.models import Account
from notifications.email import outbox
from tests.support.workers import running_worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple 9"


def test_a_signup_email_in_the_outbox_verifies_the_account(
    browser, live_server, admin_page, settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "outbox"
    settings.EMAIL_OUTBOX_DIR = str(folder)
    settings.MAILERS = {"default": {"BACKEND": outbox.BACKEND}}
    env = {"EMAIL_URL": "consolemail://", "EMAIL_OUTBOX_DIR": str(folder), "SITE_URL": live_server.url}
    with running_worker(tmp_path, "--queues", "email", "--concurrency", "1", **env) as worker:
        visitor = browser.new_context(viewport={"width": 1366, "height": 768})
        page = visitor.new_page()
        page.goto(f"{live_server.url}/accounts/signup/")
        page.fill("#id_email", "ann@example.com")
        page.fill("#id_username", "ann")
        page.fill("#id_password1", PASSWORD)
        page.fill("#id_password2", PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Check your email")
        wait_until(lambda: list(folder.glob("*.eml")), message="the email in the outbox")
        # The worker printed the text part decoded: the link is whole, on one line. (The
        # file is written first: the printed copy may reach the log a moment later.)
        link_line = f"{live_server.url}/accounts/verify/?"
        wait_until(lambda: link_line in worker.log(), message="the printed email in the worker's log")
        assert "=3D" not in worker.log()

        admin_page.set_viewport_size({"width": 1366, "height": 768})
        admin_page.goto(f"{live_server.url}/admin/outbox/")
        expect(admin_page.locator("h1")).to_have_text("Development outbox")
        expect(admin_page.locator(".outbox-mail h2")).to_have_text("Confirm your email address for jobqueue")
        no_sideways_scroll = "document.documentElement.scrollWidth <= window.innerWidth"
        assert admin_page.evaluate(no_sideways_scroll)
        shots = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
        admin_page.screenshot(path=str(shots / "20-outbox.png"))
        link = admin_page.locator(".outbox-mail ul.links a").first.get_attribute("href")
        assert link and link.startswith(f"{live_server.url}/accounts/verify/?")

        page.goto(link)
        page.click("text=Confirm my email address")
        expect(page.locator(".message.success")).to_contain_text("Your email address is confirmed")
        visitor.close()
    assert Account.objects.get(user__username="ann").email_verified_at is not None
