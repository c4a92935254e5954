"""Real-browser tests: headless Chromium (Debian's package) driven by Playwright against
Django's live server on the test database."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Module scope: Playwright's event loop must be gone before tests that use async_to_sync.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread for as long as the browser
    # lives; the ORM calls the tests (and pytest-django's teardown) make meanwhile are still
    # plain synchronous code.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def admin_page(browser, live_server, django_user_model):  # type: ignore[no-untyped-def]
    """A browser page logged into the admin as a superuser."""
    django_user_model.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse battery")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    yield page
    context.close()
