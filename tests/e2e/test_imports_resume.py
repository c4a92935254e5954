"""Reopening /imports/ while imports run (issue 10): each unfinished import gets its
progress panel back at the stage it has reached, and its bar moves on as the work does.
The work is run step by step in this process, so the page is reloaded mid-way for sure.
The page is photographed into $SCREENSHOT_DIR when set, else the test's temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.support import factories
from tests.support.accounts import verified_user

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple 9"
CSV = "name,email\n" + "".join(f"Person {n},person{n}@example.com\n" for n in range(43))


def _upload(page, path: Path) -> None:  # type: ignore[no-untyped-def]
    page.set_input_files("#id_file", str(path))
    page.click("text=Upload and import")
    expect(page.locator("#import-panel .job-state")).to_have_text("queued")


def test_reopening_the_imports_page_resumes_the_progress_of_every_unfinished_import(
    browser, live_server, media_root, tmp_path, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.REPORTS_IMPORT_CHUNK_ROWS = 10
    verified_user(username="ann", email="ann@example.com", password=PASSWORD)
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "ann")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/imports/")

    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text(CSV)
    second.write_text(CSV)
    _upload(page, first)
    factories.run_due(limit=1)  # the split
    factories.run_due(limit=1)  # one chunk of five
    expect(page.locator("#import-panel .progress-percent")).to_have_text("23 %")
    _upload(page, second)  # not read yet

    page.reload()
    resumed = page.locator(".job-panel[data-import-id]")
    expect(resumed).to_have_count(2)
    # Newest first, as listed: the second waits to be read, the first stands at 23 %.
    waiting, halfway = resumed.nth(0), resumed.nth(1)
    expect(waiting.locator(".job-title")).to_have_text("second.csv")
    expect(waiting.locator(".progress-message")).to_have_text("waiting to be read")
    expect(halfway.locator(".job-title")).to_have_text("first.csv")
    expect(halfway.locator(".job-state")).to_have_text("running")
    expect(halfway.locator(".progress")).to_be_visible()
    expect(halfway.locator(".progress-percent")).to_have_text("23 %")
    expect(halfway.locator(".progress-message")).to_contain_text("10 of 43")
    row = page.locator(f'#recent-imports tr[data-id="{halfway.get_attribute("data-import-id")}"]')
    expect(row.locator(".badge")).to_have_text("running")
    page.wait_for_timeout(400)  # the bar's width eases in
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / "imports-reopened.png"), full_page=True)

    # The page polls on: the bar follows the next chunk without another reload.
    factories.run_due(limit=1)
    expect(halfway.locator(".progress-percent")).not_to_have_text("23 %")
    percent = int(halfway.locator(".progress-percent").inner_text().split()[0])
    assert 23 < percent <= 100
    while factories.run_due():  # the chunks, then each import's summary
        pass
    for panel in (waiting, halfway):
        expect(panel.locator(".progress-percent")).to_have_text("100 %", timeout=15_000)
        expect(panel.locator(".counts")).to_contain_text("43 rows: ")
    expect(page.locator("#recent-imports table.list td.num").first).to_have_text("43")
    context.close()
