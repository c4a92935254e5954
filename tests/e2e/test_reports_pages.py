"""The imports and reports pages in a real browser with a real worker (issue 16): log in,
upload a CSV with a few bad rows, watch the progress bar reach 100 %, download the
rejected rows, start a report, watch it, download it. Both pages are photographed while
running and when done (into $SCREENSHOT_DIR when set, else the test's temporary folder)."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest
from django.db import connection
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.support import factories
from tests.support.accounts import verified_user
from tests.support.workers import running_worker

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple 9"
CSV = "name,email,phone,country\n" + "".join(
    f"Person {n},person{n}@example.com,+49 30 {n:04d},DE\n" for n in range(40)
) + ("No Address,,,FR\nBad Mail,bad-mail,,FR\nNo Such Country,nowhere@example.com,,Atlantis\n")  # fmt: skip


@pytest.fixture
def shots(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)

    def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    return shoot


def _bar(page):  # type: ignore[no-untyped-def]
    return page.locator(".job-panel .progress-percent")


def test_import_a_csv_with_bad_rows_then_make_and_download_a_report(
    browser, live_server, media_root, tmp_path, shots, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.REPORTS_IMPORT_CHUNK_ROWS = 10
    user = verified_user(username="ann", email="ann@example.com", password=PASSWORD)
    context = browser.new_context(viewport={"width": 1366, "height": 768}, accept_downloads=True)
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "ann")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.click("text=Imports")
    expect(page.locator("h1")).to_have_text("Import customers")

    upload = tmp_path / "customers.csv"
    upload.write_text(CSV)
    page.set_input_files("#id_file", str(upload))
    page.click("text=Upload and import")
    expect(page.locator(".job-panel .job-state")).to_have_text("queued")
    # Listed among the recent imports as soon as it is accepted, not "None yet".
    expect(page.locator("#recent-imports table.list")).to_contain_text("customers.csv")
    expect(page.locator("#recent-imports table.list .badge")).to_have_text("queued")
    # Part of it done (the split and one chunk of five, in this process): the bar shows it,
    # and the list's row keeps the panel's status.
    factories.run_due(limit=1)
    factories.run_due(limit=1)
    expect(_bar(page)).to_have_text("23 %")
    expect(page.locator("#recent-imports table.list .badge")).to_have_text("running")
    # Its counts are left blank until it has finished (not zeros while rows are being read).
    expect(page.locator("#recent-imports table.list td.num").first).to_have_text("")
    expect(page.locator(".job-panel .progress-message")).to_contain_text("10 of 43")
    page.wait_for_timeout(400)  # the bar's width eases in
    shots(page, "reports-imports-running")

    env = {"MEDIA_ROOT": str(media_root), "SITE_URL": live_server.url}
    with running_worker(tmp_path, "--concurrency", "2", **env):
        expect(_bar(page)).to_have_text("100 %", timeout=30_000)
        expect(page.locator(".job-panel .counts")).to_contain_text(
            "43 rows: 40 new, 0 updated, 0 unchanged, 3 rejected."
        )
        # The list of recent imports is fetched again once the import has finished.
        expect(page.locator("#recent-imports table.list")).to_contain_text("customers.csv")
        expect(page.locator("#recent-imports table.list td.num")).to_have_text(["43", "40", "0", "3"])
        page.wait_for_timeout(400)
        shots(page, "reports-imports-done")
        with page.expect_download() as download_info:
            page.click("#rejected-download")
        rejected = Path(download_info.value.path()).read_text()
        rows = list(csv.reader(io.StringIO(rejected)))
        assert [row[:2] for row in rows] == [
            ["line", "reason"],
            ["42", "email is missing"],
            ["43", "email 'bad-mail' is not a valid address"],
            [
                "44",
                "“Atlantis” is not a country we know. Enter a country's name (such as Germany) "
                "or its two-letter code (such as DE), or leave it empty.",
            ],
        ]

        # Enough customers that the report takes a moment, so the bar can be seen moving.
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO reports_customer (owner_id, name, email, phone, country, created_at, updated_at)
                SELECT %s, 'Extra ' || n, 'extra' || n || '@example.com', '', 'FR', now(), now()
                FROM generate_series(1, 60000) AS n
                """,
                [user.pk],
            )
        page.click("text=Reports")
        expect(page.locator("h1")).to_have_text("Reports")
        expect(page.locator("#recent-reports")).to_contain_text("None yet.")
        page.click("text=Start report")
        expect(page.locator(".job-panel")).to_be_visible()
        # Listed as soon as it is accepted, not only once it is done.
        expect(page.locator("#recent-reports table.list")).to_contain_text("My imported customers")
        try:
            page.wait_for_function(
                """() => { const t = document.querySelector('.job-panel .progress-percent').textContent;
                           const p = parseInt(t, 10); return p >= 20 && p < 100; }""",
                timeout=20_000,
                polling=50,
            )
            page.wait_for_timeout(250)  # the bar's width eases in
        except PlaywrightTimeout:
            pass  # a fast machine: the photograph shows whatever stage it is at
        shots(page, "reports-reports-running")
        expect(_bar(page)).to_have_text("100 %", timeout=60_000)
        expect(page.locator("#report-download")).to_contain_text("Download customers-")
        expect(page.locator("#recent-reports table.list")).to_contain_text("My imported customers")
        page.wait_for_timeout(400)
        shots(page, "reports-reports-done")
        with page.expect_download() as download_info:
            page.click("#report-download")
        with Path(download_info.value.path()).open() as handle:
            reader = csv.reader(handle)
            assert next(reader) == ["name", "email", "phone", "country", "created_at", "updated_at"]
            assert next(reader)[:2] == ["Person 0", "person0@example.com"]
            assert sum(1 for _ in reader) == 60_039
    context.close()
