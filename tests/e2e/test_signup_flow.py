"""The whole account flow in a real browser against a live server, with a real runworker
sending the emails to the SMTP server on loopback: sign up, read the email, open the link,
confirm, log in, log out, reset the password. Every page is photographed on the way
(into $SCREENSHOT_DIR when set, else the test's temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.support.mail import link_in
from tests.support.workers import running_worker

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple 9"
NEW_PASSWORD = "another correct horse battery 10"


@pytest.fixture
def shots(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)

    def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    return shoot


def test_sign_up_confirm_log_in_log_out_and_reset_the_password(
    browser, live_server, smtp_sink, tmp_path, shots
) -> None:  # type: ignore[no-untyped-def]
    env = {"EMAIL_URL": smtp_sink.url, "SITE_URL": live_server.url}
    with running_worker(tmp_path, "--queues", "email", "--concurrency", "1", **env):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{live_server.url}/")
        expect(page.locator("h1")).to_contain_text("Background jobs")
        shots(page, "01-home")

        page.click("text=Create an account")
        expect(page).to_have_url(f"{live_server.url}/accounts/signup/")
        shots(page, "02-signup")
        page.fill("#id_email", "ann@example.com")
        page.fill("#id_username", "ann")
        page.fill("#id_password1", "password")
        page.fill("#id_password2", "passw0rd")
        page.click("button[type=submit]")
        expect(page.locator("#id_password2_errors")).to_contain_text("didn’t match")
        shots(page, "03-signup-errors")

        page.fill("#id_password1", PASSWORD)
        page.fill("#id_password2", PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Check your email")
        shots(page, "04-check-your-email")

        # Not confirmed yet: logging in says so.
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("#id_username", "ann")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator(".alert.error")).to_contain_text("not confirmed yet")
        shots(page, "05-login-unverified")

        [message] = smtp_sink.wait_for("ann@example.com")
        link = link_in(message, "/accounts/verify/")
        assert link.startswith(live_server.url)
        page.goto(link)
        expect(page.locator("h1")).to_have_text("Confirm your email address")
        shots(page, "06-confirm")
        page.click("text=Confirm my email address")
        expect(page.locator(".message.success")).to_contain_text("Your email address is confirmed")
        shots(page, "07-login-after-confirm")

        page.fill("#id_username", "ann@example.com")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Welcome back, ann")
        shots(page, "08-home-signed-in")

        page.click("header >> text=Log out")
        expect(page.locator("h1")).to_have_text("You are logged out")
        shots(page, "09-logged-out")

        # The used link now gets the one generic page, with its new-link form.
        page.goto(link)
        expect(page.locator("h1")).to_have_text("This link does not work")
        shots(page, "10-invalid-link")
        page.goto(f"{live_server.url}/accounts/verify/resend/")
        shots(page, "11-resend")

        page.goto(f"{live_server.url}/accounts/password/reset/")
        shots(page, "12-password-reset")
        page.fill("#id_email", "ann@example.com")
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Check your email")
        shots(page, "13-password-reset-sent")

        [reset] = [m for m in smtp_sink.wait_for("ann@example.com", count=2) if "Reset" in m["Subject"]]
        page.goto(link_in(reset, "/accounts/password/reset/"))
        expect(page.locator("h1")).to_have_text("Choose a new password")
        shots(page, "14-password-reset-confirm")
        page.fill("#id_new_password1", NEW_PASSWORD)
        page.fill("#id_new_password2", NEW_PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Your password is changed")
        shots(page, "15-password-reset-complete")

        page.locator("main").get_by_role("link", name="Log in", exact=True).click()
        page.fill("#id_username", "ann")
        page.fill("#id_password", NEW_PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Welcome back, ann")
        context.close()
    assert get_user_model().objects.get(username="ann").check_password(NEW_PASSWORD)


def test_a_locked_out_login_page(browser, live_server, shots, settings) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("#id_username", "nobody")
        page.fill("#id_password", "wrong")
        page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Too many failed logins")
    shots(page, "16-locked-out")
