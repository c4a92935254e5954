"""CSV imports (issue 16): the file is stored, checked and split into chunk jobs that
upsert customers exactly once; bad rows are set aside with their reason and downloadable;
bad files are refused with a clear message and leave nothing behind."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.test.utils import override_settings

from jobs.models import Job
from jobs.states import State
from reports.models import Customer, Import, ImportChunk, ImportRejection
from reports.tasks import import_chunk, split_import
from tests.support import factories

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

GOOD_AND_BAD = (
    "name,email,phone,country\n"
    "Ann Lee,ann@example.com,+1 555 0100,us\n"
    "Bo Chen,bo@example.com,,China\n"  # a country's name is stored as its code
    ",nobody@example.com,,\n"  # line 4: no name
    "Cy Diaz,not-an-address,,ES\n"  # line 5: bad email
    '"Dee, the second",dee@example.com,(030) 1234,DE\n'
    "Eve Moss,ANN@example.com,,GB\n"  # line 7: the same email as line 2
    "Fay Wu,fay@example.com,,XX\n"  # line 8: shaped like a code, but no country's
    "Gus Hale,gus@example.com\n"  # line 9: a field short
    "\n"  # line 10: blank, not a row
    '"Hal\nwith a newline",hal@example.com,,FR\n'  # line 11 (two physical lines)
    "Ivy Park,ivy@example.com,12345,kr\n"
)


@pytest.fixture
def ann(db: None) -> User:
    return User.objects.create_user("ann", "ann@example.com", "pw-ann-12345")


@pytest.fixture
def logged_in(client: Client, ann: User) -> Client:
    client.force_login(ann)
    return client


XX_REASON = (
    "“XX” is not a country we know. Enter a country's name (such as Germany) "
    "or its two-letter code (such as DE), or leave it empty."
)


def upload(client: Client, content: bytes | str, name: str = "customers.csv") -> dict:
    data = content.encode() if isinstance(content, str) else content
    response = client.post("/api/imports", {"file": SimpleUploadedFile(name, data, content_type="text/csv")})
    return {**response.json(), "http": response.status_code}


def run_all() -> int:
    """Run due jobs until none are left (the split enqueues chunks, the last one the summary)."""
    ran = 0
    while outcomes := factories.run_due():
        ran += len(outcomes)
    return ran


def status(client: Client, import_id: str) -> dict:
    response = client.get(f"/api/imports/{import_id}")
    assert response.status_code == 200
    return response.json()


def stored_files() -> list[Path]:
    return [path for path in Path(settings.MEDIA_ROOT).rglob("*") if path.is_file()]


def test_an_import_upserts_good_rows_and_sets_bad_ones_aside_with_the_reason(
    logged_in: Client, ann: User
) -> None:
    answer = upload(logged_in, GOOD_AND_BAD)
    assert answer["http"] == 202
    assert answer["progress"]["percent"] is None and answer["job_id"]
    # Stored first: the job carries the import's id, not the file.
    record = Import.objects.get(id=answer["id"])
    assert Job.objects.get(id=answer["job_id"]).args == [str(record.id)]
    assert Path(settings.MEDIA_ROOT, record.stored_name).exists()
    run_all()
    body = status(logged_in, answer["id"])
    assert body["status"] == "finished"
    assert body["counts"] == {
        "rows": 10, "inserted": 5, "updated": 0, "unchanged": 0, "rejected": 5, "unread": 0
    }  # fmt: skip
    assert body["progress"]["done"] == body["progress"]["total"] == 10
    assert body["progress"]["percent"] == 100
    customers = {c.email: c for c in Customer.objects.filter(owner=ann)}
    assert set(customers) == {
        "ann@example.com", "bo@example.com", "dee@example.com", "hal@example.com", "ivy@example.com"
    }  # fmt: skip
    assert (customers["ann@example.com"].phone, customers["ann@example.com"].country) == ("+1 555 0100", "US")
    assert customers["ivy@example.com"].country == "KR"
    assert customers["bo@example.com"].country == "CN"
    assert customers["dee@example.com"].name == "Dee, the second"
    assert customers["hal@example.com"].name == "Hal\nwith a newline"
    # The rejected rows, with their record number (the header is 1) and reason, as a CSV:
    # each value under its own column, and a line that does not fit the header as it was
    # written, in a column of its own.
    response = logged_in.get(body["rejected_file"]["download_url"])
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows == [
        ["line", "reason", "name", "email", "phone", "country", "text of a line that does not fit"],
        ["4", "name is missing", "", "nobody@example.com", "", "", ""],
        ["5", "email 'not-an-address' is not a valid address", "Cy Diaz", "not-an-address", "", "ES", ""],
        ["7", "the same email is on line 2", "Eve Moss", "ANN@example.com", "", "GB", ""],
        ["8", XX_REASON, "Fay Wu", "fay@example.com", "", "XX", ""],
        ["9", "the line has 2 fields but the header has 4 (name, email, phone, country)",
         "", "", "", "", "Gus Hale,gus@example.com"],
    ]  # fmt: skip
    # The upload itself is deleted once the summary is written; the rejected rows stay.
    assert not Path(settings.MEDIA_ROOT, record.stored_name).exists()


def test_progress_is_the_sum_over_chunks(logged_in: Client) -> None:
    lines = "".join(f"P{n},p{n}@example.com,,\n" for n in range(10))
    with override_settings(REPORTS_IMPORT_CHUNK_ROWS=3):
        answer = upload(logged_in, "name,email,phone,country\n" + lines)
        factories.run_due(limit=1)  # the split
    record = Import.objects.get(id=answer["id"])
    assert (record.status, record.total_rows, record.chunk_count) == ("running", 10, 4)
    seen = [status(logged_in, answer["id"])["progress"]]
    while factories.run_due(limit=1):
        seen.append(status(logged_in, answer["id"])["progress"])
    done = [p["done"] for p in seen]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 10
    assert {3, 6, 9} <= set(done) or len(set(done)) >= 4
    assert seen[-1]["percent"] == 100
    assert ImportChunk.objects.filter(job_import=record).count() == 4
    assert Customer.objects.count() == 10


def test_importing_again_changes_only_what_differs_matching_emails_in_any_case(
    logged_in: Client, ann: User
) -> None:
    first = "name,email\nAnn,ann@example.com\nBo,bo@example.com\n"
    upload(logged_in, first)
    run_all()
    again = upload(logged_in, first)
    run_all()
    assert status(logged_in, again["id"])["counts"] == {
        "rows": 2, "inserted": 0, "updated": 0, "unchanged": 2, "rejected": 0, "unread": 0
    }  # fmt: skip
    changed = upload(logged_in, "email,name\nANN@EXAMPLE.COM,Ann Lee\nbo@example.com,Bo\ncy@example.com,Cy\n")
    run_all()
    assert status(logged_in, changed["id"])["counts"] == {
        "rows": 3, "inserted": 1, "updated": 1, "unchanged": 1, "rejected": 0, "unread": 0
    }  # fmt: skip
    ann_row = Customer.objects.get(owner=ann, email__iexact="ann@example.com")
    assert (ann_row.name, ann_row.email) == ("Ann Lee", "ANN@EXAMPLE.COM")
    assert Customer.objects.filter(owner=ann).count() == 3
    # Another owner's customers are their own, even with the same addresses.
    other = User.objects.create_user("bob", "bob@example.com", "pw-bob-12345")
    logged_in.force_login(other)
    upload(logged_in, first)
    run_all()
    assert Customer.objects.filter(owner=other).count() == 2
    assert Customer.objects.filter(owner=ann).count() == 3


def test_a_retried_chunk_changes_nothing_twice(logged_in: Client) -> None:
    with override_settings(REPORTS_IMPORT_CHUNK_ROWS=2):
        answer = upload(logged_in, "name,email\nA,a@example.com\nB,b@example.com\nC,bad\nD,d@example.com\n")
        run_all()
    before = status(logged_in, answer["id"])
    assert before["counts"] == {
        "rows": 4,
        "inserted": 3,
        "updated": 0,
        "unchanged": 0,
        "rejected": 1,
        "unread": 0,
    }
    chunk_jobs = Job.objects.filter(task_path="reports.tasks.import_chunk")
    assert chunk_jobs.count() == 2
    # Every chunk again, as a retry after a lost outcome (or a duplicate job) would.
    again = [import_chunk.enqueue(*job.args).id for job in chunk_jobs]
    run_all()
    for job in Job.objects.filter(id__in=again):
        assert job.state == State.SUCCEEDED and job.result["already"] is True
    assert status(logged_in, answer["id"])["counts"] == before["counts"]
    assert Customer.objects.count() == 3
    assert ImportRejection.objects.count() == 1
    assert Job.objects.filter(task_path="reports.tasks.summarize_import").count() == 1


def test_a_retried_split_enqueues_nothing_twice(logged_in: Client) -> None:
    answer = upload(logged_in, "name,email\nA,a@example.com\n")
    run_all()
    split_import.enqueue(answer["id"])
    run_all()
    assert Job.objects.filter(task_path="reports.tasks.import_chunk").count() == 1
    assert Customer.objects.count() == 1


def test_a_file_with_a_header_only_finishes_with_nothing_to_do(logged_in: Client) -> None:
    answer = upload(logged_in, "name,email\n")
    run_all()
    body = status(logged_in, answer["id"])
    assert body["status"] == "finished" and body["counts"]["rows"] == 0
    assert body["progress"]["percent"] == 100


def test_a_row_the_csv_module_cannot_read_is_rejected_alone_and_the_rest_are_read(
    logged_in: Client, ann: User
) -> None:
    # Invariant 17: a field past the csv module's limit (131,072 characters) once ended the
    # chunk's reader, and the rows after it were neither stored nor rejected.
    huge = "x" * 131_073
    lines = [f"P{n},p{n}@example.com,,\n" for n in range(10)]
    lines[1] = f'"{huge}",p1@example.com,,\n'
    # A quote never closed: the scan and the chunk both take the rest of the file as one
    # record, rejected whole.
    lines[4] = 'Bad "quote,q4@example.com,,\n'
    answer = upload(logged_in, "name,email,phone,country\n" + "".join(lines))
    run_all()
    body = status(logged_in, answer["id"])
    assert body["status"] == "finished"
    assert body["counts"] == {
        "rows": 5, "inserted": 3, "updated": 0, "unchanged": 0, "rejected": 2, "unread": 0
    }  # fmt: skip
    assert body["progress"]["done"] == body["progress"]["total"] == 5
    assert Customer.objects.filter(owner=ann).count() == 3
    reasons = dict(ImportRejection.objects.values_list("line", "reason"))
    assert set(reasons) == {3, 6}
    assert reasons == {
        3: "a field is longer than 131,072 characters",
        6: "a quote is not closed, so this line runs on into the next ones",
    }
    rows = list(
        csv.reader(
            io.StringIO(
                b"".join(logged_in.get(body["rejected_file"]["download_url"]).streaming_content).decode()
            )
        )
    )
    # The reason in its column, the line's text in the last one, no value under name.
    assert [row[:6] for row in rows[1:]] == [
        ["3", reasons[3], "", "", "", ""],
        ["6", reasons[6], "", "", "", ""],
    ]
    assert rows[1][6] == f'"{huge}",p1@example.com,,\n'[:1000]  # the unreadable line, shortened
    assert rows[2][6].startswith('Bad "quote,q4@example.com,,\n')


def test_rejected_rows_that_a_spreadsheet_would_run_as_formulas_are_written_as_text(
    logged_in: Client,
) -> None:
    answer = upload(logged_in, 'name,email\n"=HYPERLINK(""https://evil.example"",""x"")",nope\n@SUM(1+1),\n')
    run_all()
    body = status(logged_in, answer["id"])
    response = logged_in.get(body["rejected_file"]["download_url"])
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row[2] for row in rows[1:]] == ['\'=HYPERLINK("https://evil.example","x")', "'@SUM(1+1)"]


def test_an_import_that_read_fewer_rows_than_it_counted_says_so_and_keeps_its_total(
    logged_in: Client,
) -> None:
    answer = upload(logged_in, "name,email\nAnn,ann@example.com\nBo,bo@example.com\n")
    factories.run_due(limit=1)  # the split counts 2 rows
    # As if the scan had counted rows no chunk read.
    Import.objects.filter(id=answer["id"]).update(total_rows=5)
    run_all()
    record = Import.objects.get(id=answer["id"])
    assert (record.total_rows, record.rows_done, record.unread) == (5, 2, 3)
    body = status(logged_in, answer["id"])
    assert body["counts"]["unread"] == 3 and body["progress"]["total"] == 5
    assert body["progress"]["message"] == "finished; 3 rows could not be read"


def test_progress_messages_count_one_thing_in_the_singular(logged_in: Client) -> None:
    answer = upload(logged_in, "name,email\nAnn,ann@example.com\n")
    factories.run_due(limit=1)  # the split: one chunk of one row
    split = Job.objects.get(id=answer["job_id"])
    assert split.progress["message"] == "1 chunk queued"
    assert status(logged_in, answer["id"])["progress"]["message"] == "0 of 1 chunk done"
    chunk = Job.objects.get(task_path="reports.tasks.import_chunk")
    factories.run_due(limit=1)
    chunk.refresh_from_db()
    assert chunk.progress["message"] == "chunk 0: 1 row checked"
    Import.objects.filter(id=answer["id"]).update(total_rows=2)  # as if one row were not read
    run_all()
    assert status(logged_in, answer["id"])["progress"]["message"] == "finished; 1 row could not be read"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (
            b"nom,courriel\nAnn,ann@example.com\n",
            "unknown columns 'nom', 'courriel'; expected a header",
        ),
        (b"name,phone\nAnn,1\n", "missing column email; expected a header line with name, email"),
        (b"name,email,email\n", "column email appears more than once"),
        ("name,email\nJosé,jose@example.com\n".encode("latin-1"), "the file is not UTF-8 text (byte 0xe9"),
        (b"name,email\n\x00\x01\x02", "the file is not a CSV text file (it holds NUL bytes)"),
        (b"\n\nAnn,ann@example.com\n", "the file has no header line"),
    ],
)
def test_a_bad_file_is_refused_with_a_clear_message_and_leaves_nothing_behind(
    logged_in: Client, content: bytes, message: str
) -> None:
    answer = upload(logged_in, content)
    assert answer["http"] == 400
    assert answer["error"].startswith(message), answer["error"]
    assert Import.objects.count() == 0 and Job.objects.count() == 0
    assert stored_files() == []


def test_an_oversized_file_is_refused_and_leaves_nothing_behind(logged_in: Client) -> None:
    content = "name,email\n" + "Ann,ann@example.com\n" * 100
    with override_settings(REPORTS_IMPORT_MAX_BYTES=1000):
        answer = upload(logged_in, content)
        assert answer == {"http": 400, "error": "the file is 2,011 bytes; the limit is 1,000 bytes"}
        # Refused from its declared length, before the body is read.
        huge = upload(logged_in, "name,email\n" + "x" * 100_000)
        assert huge["http"] == 400 and huge["error"].startswith("the upload is too big")
    assert Import.objects.count() == 0 and Job.objects.count() == 0 and stored_files() == []


def test_the_api_wants_a_caller_and_a_file(client: Client, ann: User) -> None:
    response = client.post("/api/imports", {"file": SimpleUploadedFile("a.csv", b"name,email\n")})
    assert response.status_code == 401
    client.force_login(ann)
    response = client.post("/api/imports", {})
    assert response.status_code == 400
    assert response.json()["error"] == "send the CSV file as multipart/form-data in a field named 'file'"
    # A session must pass the CSRF check.
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(ann)
    response = strict.post("/api/imports", {"file": SimpleUploadedFile("a.csv", b"name,email\n")})
    assert response.status_code == 403 and Import.objects.count() == 0


def test_an_import_and_its_rejected_rows_are_the_owners_only(logged_in: Client, ann: User) -> None:
    answer = upload(logged_in, "name,email\nA,bad\n")
    run_all()
    url = status(logged_in, answer["id"])["rejected_file"]["download_url"]
    logged_in.force_login(User.objects.create_user("bob", "bob@example.com", "pw-bob-12345"))
    assert logged_in.get(f"/api/imports/{answer['id']}").status_code == 404
    assert logged_in.get(url).status_code == 404
    logged_in.force_login(User.objects.create_user("ops", "ops@example.com", "pw-ops-12345", is_staff=True))
    assert logged_in.get(url).status_code == 200


def test_the_imports_page_shows_recent_imports(logged_in: Client) -> None:
    upload(logged_in, "name,email\nA,a@example.com\nB,bad\n", name="march.csv")
    run_all()
    page = logged_in.get("/imports/").content.decode()
    assert "march.csv" in page and "rejected rows" in page
    logged_in.logout()
    assert logged_in.get("/imports/").status_code == 302
