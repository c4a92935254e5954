"""Bad input on the report form and the schedule form, in a real browser: the message a
person reads, what they typed still there, and (reports) the last report's panel gone once
another is asked for. Both forms are photographed with their error (into $SCREENSHOT_DIR
when set, else the test's temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from jobs.models import Job, Schedule
from tests.support import factories
from tests.support.accounts import verified_user

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple 9"
UNKNOWN_XX = (
    "“XX” is not a country we know. Enter a country's name (such as Germany) "
    "or its two-letter code (such as DE), or leave it empty for all countries."
)


@pytest.fixture
def shots(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)

    def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
        page.screenshot(path=str(folder / f"{name}.png"), full_page=False)

    return shoot


def _report_params() -> list[dict]:
    return [
        job.args[1]
        for job in Job.objects.filter(task_path="reports.tasks.build_report").order_by("created_at")
    ]


def test_the_report_form_takes_a_country_by_name_and_says_plainly_what_is_wrong(
    browser, live_server, shots
) -> None:  # type: ignore[no-untyped-def]
    verified_user(username="ann", email="ann@example.com", password=PASSWORD)
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "ann")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/reports/")
    panel = page.locator("#report-panel")
    error = page.locator("#report-error")

    # The whole name is sent (it was once cut to "Ge", Georgia) and read as Germany's code.
    page.fill("#id_country", "Germany")
    page.click("text=Start report")
    expect(panel).to_be_visible()
    expect(panel.locator(".job-state")).to_have_text("queued")
    assert _report_params() == [{"country": "DE"}]

    # A code that is no country's: said plainly, without the API's field name; the panel
    # of the report asked for before is gone, and stays gone while its poll would go on.
    page.fill("#id_country", "XX")
    page.click("text=Start report")
    expect(error).to_be_visible()
    expect(panel).to_be_hidden()
    expect(error).to_have_text(UNKNOWN_XX)
    expect(page.locator("#id_country")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#id_country")).to_have_value("XX")
    assert "params." not in page.locator("main, body").first.inner_text()
    page.wait_for_timeout(1200)  # three of the old report's polls
    expect(panel).to_be_hidden()
    assert _report_params() == [{"country": "DE"}]
    shots(page, "report-form-error")

    # Corrected: the error goes, a new panel shows the new report.
    page.fill("#id_country", "france")
    page.click("text=Start report")
    expect(panel).to_be_visible()
    expect(error).to_be_hidden()
    expect(page.locator("#id_country")).not_to_have_attribute("aria-invalid", "true")
    assert _report_params() == [{"country": "DE"}, {"country": "FR"}]
    context.close()


def test_the_schedule_form_says_a_schedule_needs_a_cron_or_an_interval(
    browser, live_server, django_user_model, shots
) -> None:  # type: ignore[no-untyped-def]
    django_user_model.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse battery")
    page.click("input[type=submit]")
    page.goto(f"{live_server.url}/admin/jobs/schedule/add/")
    page.fill("#id_name", "nightly-report")
    page.fill("#id_task_path", "tests.tasks.scheduled.for_user")
    page.fill("#id_args", "[1, 2")
    page.fill("#id_kwargs", "{}")
    page.fill("#id_cron", "")
    page.fill("#id_interval_seconds", "")
    page.click("input[name=_save]")
    errors = page.locator(".errorlist li")
    expect(errors).to_have_text(
        [
            'The arguments are not valid JSON. Enter a JSON list, such as [42, "weekly"], or [] for none.',
            "Enter a cron expression or an interval in seconds: the schedule has neither.",
        ]
    )
    expect(page.locator("#id_args")).to_have_value("[1, 2")
    assert "jobs_schedule_" not in page.content()
    assert not Schedule.objects.filter(name="nightly-report").exists()
    page.locator(".errorlist").first.scroll_into_view_if_needed()
    shots(page, "schedule-form-error")
    page.locator(".field-cron").evaluate("row => row.scrollIntoView({block: 'center'})")
    shots(page, "schedule-form-error-timing")
    context.close()


def test_an_import_of_one_row_says_row_not_rows(browser, live_server, media_root, tmp_path) -> None:  # type: ignore[no-untyped-def]
    verified_user(username="ann", email="ann@example.com", password=PASSWORD)
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "ann")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/imports/")
    upload = tmp_path / "one.csv"
    upload.write_text("name,email,phone,country\nFay Wu,fay@example.com,,XX\n")
    page.set_input_files("#id_file", str(upload))
    page.click("text=Upload and import")
    expect(page.locator(".job-panel .job-state")).to_have_text("queued")
    while factories.run_due():
        pass
    expect(page.locator(".job-panel .counts")).to_have_text(
        "1 row: 0 new, 0 updated, 0 unchanged, 1 rejected."
    )
    expect(page.locator("#rejected-download")).to_have_text("Download the rejected row (1)")
    context.close()
