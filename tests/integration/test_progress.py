"""Progress and result files in the engine (issue 16): ``context.set_progress`` checked,
written fenced and throttled, carried with the outcome, shown by the status API and
``get_result``; result files stored, downloaded only by their owner or staff through an
unexpired signed link, and deleted with their job."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from jobs import files, store
from jobs.models import Job
from jobs.states import State
from tests.conftest import side_effect_counts
from tests.support import factories
from tests.tasks import progress as tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(db: None) -> User:
    return User.objects.create_user("ann", "ann@example.com", "pw-ann-12345")


def _status(client: Client, job_id: str) -> dict:
    response = client.get(f"/api/jobs/{job_id}")
    assert response.status_code == 200, response.content
    return response.json()


# --- checking ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("done", "total", "message", "answer"),
    [
        ("3", 10, "", "TypeError: progress done must be an int, not str"),
        (True, 10, "", "TypeError: progress done must be an int, not bool"),
        (-1, 10, "", "ValueError: progress done must be >= 0, got -1"),
        (11, 10, "", "ValueError: progress done (11) is more than total (10)"),
        (1, 2.5, "", "TypeError: progress total must be an int or None, not float"),
        (1, -2, "", "ValueError: progress total must be >= 0, got -2"),
        (1, None, 7, "TypeError: progress message must be a str, not int"),
        (5, None, "no total yet", "accepted"),
    ],
)
def test_a_bad_progress_report_is_refused_with_a_clear_error(
    done: object, total: object, message: object, answer: str
) -> None:
    result = tasks.bad_progress.enqueue(done, total, message)
    factories.run_due()
    job = Job.objects.get(id=result.id)
    assert (job.state, job.result) == (State.SUCCEEDED, answer)
    # A refused report changes nothing; an accepted one is kept.
    if answer == "accepted":
        assert {k: job.progress[k] for k in ("done", "total", "message")} == {
            "done": 5, "total": None, "message": "no total yet"
        }  # fmt: skip
    else:
        assert job.progress is None


def test_a_long_message_is_cut_not_refused() -> None:
    result = tasks.count_to.enqueue(2, "x" * 2000)
    factories.run_due()
    assert Job.objects.get(id=result.id).progress["message"] == "x" * 500


# --- the outcome carries the last report ------------------------------------------------------


def test_the_last_report_goes_with_the_outcome_and_the_status_api_shows_it(
    client: Client, owner: User
) -> None:
    result = tasks.count_to.using(owner=owner).enqueue(40)
    client.force_login(owner)
    assert _status(client, result.id)["progress"] is None
    factories.run_due()
    progress = _status(client, result.id)["progress"]
    assert progress["done"] == progress["total"] == 40
    assert progress["percent"] == 100
    assert progress["message"] == "40 of 40"
    job = Job.objects.get(id=result.id)
    assert progress["updated_at"] is not None and job.finished_at is not None
    # The database's clock, written with the outcome.
    assert timezone.datetime.fromisoformat(progress["updated_at"]) == job.finished_at
    got = tasks.count_to.get_result(result.id)
    assert got.progress == progress
    result.refresh()
    assert result.progress == progress


def test_a_failed_attempt_keeps_its_last_report(client: Client, owner: User) -> None:
    result = tasks.count_then_fail.using(owner=owner).enqueue(10)
    factories.run_due()
    client.force_login(owner)
    body = _status(client, result.id)
    assert body["status"] == "dead"
    assert body["progress"]["done"] == 5 and body["progress"]["percent"] == 50
    assert body["progress"]["message"] == "half way"


def test_plain_jobs_have_no_progress(client: Client, owner: User) -> None:
    from tests.tasks import basic

    result = basic.add.using(owner=owner).enqueue(1, 2)
    factories.run_due()
    client.force_login(owner)
    assert _status(client, result.id)["progress"] is None
    assert Job.objects.get(id=result.id).progress is None


def test_progress_is_not_shown_to_strangers_of_a_public_job(client: Client) -> None:
    result = tasks.count_to.using(public=True, owner="auth.user:999").enqueue(3, "private words")
    factories.run_due()
    body = _status(client, result.id)
    assert "progress" not in body and "private words" not in str(body)


def test_a_replayed_job_starts_without_progress() -> None:
    result = tasks.count_then_fail.enqueue(10)
    factories.run_due()
    store.replay(result.id)
    assert Job.objects.get(id=result.id).progress is None


# --- interim writes are fenced ----------------------------------------------------------------


def test_an_interim_report_is_written_only_under_the_current_claim() -> None:
    job = factories.job(State.RUNNING, attempt=2)
    report = {"done": 3, "total": 9, "message": "three"}
    with connection.cursor() as cursor:
        # Another worker's token, or an earlier attempt: nothing changes.
        assert (
            store.record_progress(
                cursor, worker=uuid.uuid4(), reports=[{"id": job.id, "attempt": 2, "progress": report}]
            )
            == set()
        )
        assert (
            store.record_progress(
                cursor, worker=job.worker_id, reports=[{"id": job.id, "attempt": 1, "progress": report}]
            )
            == set()
        )
        assert Job.objects.get(id=job.id).progress is None
        assert store.record_progress(
            cursor, worker=job.worker_id, reports=[{"id": job.id, "attempt": 2, "progress": report}]
        ) == {job.id}
    written = Job.objects.get(id=job.id).progress
    assert {k: written[k] for k in report} == report and written["updated_at"]
    # A finished job keeps what its outcome wrote.
    Job.objects.filter(id=job.id).update(state=State.SUCCEEDED, worker_id=None, lease_expires_at=None)
    with connection.cursor() as cursor:
        late = {"done": 1, "total": 9, "message": "late"}
        assert (
            store.record_progress(
                cursor, worker=job.worker_id, reports=[{"id": job.id, "attempt": 2, "progress": late}]
            )
            == set()
        )
    assert Job.objects.get(id=job.id).progress["message"] == "three"


# --- result files --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _media(media_root: Path) -> None:
    """Result files of this test only."""


def _file_job(owner: User) -> tuple[str, dict]:
    result = tasks.write_file.using(owner=owner).enqueue("hello, file")
    factories.run_due()
    return result.id, Job.objects.get(id=result.id).result


def test_a_result_file_is_stored_and_its_owner_downloads_it(client: Client, owner: User) -> None:
    job_id, result = _file_job(owner)
    assert result["file"]["name"] == f"job-results/{job_id}/greeting.txt"
    assert result["file"]["size"] == len("hello, file")
    assert files.result_storage().exists(result["file"]["name"])
    client.force_login(owner)
    body = _status(client, job_id)
    assert (body["file"]["filename"], body["file"]["size"]) == ("greeting.txt", 11)
    response = client.get(body["file"]["download_url"])
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"hello, file"
    disposition = response["Content-Disposition"]
    assert "attachment" in disposition and "greeting.txt" in disposition
    # Staff may download it too.
    staff = User.objects.create_user("ops", "ops@example.com", "pw-ops-12345", is_staff=True)
    client.force_login(staff)
    assert client.get(body["file"]["download_url"]).status_code == 200


def test_the_download_link_refuses_other_users_and_anonymous_callers(client: Client, owner: User) -> None:
    job_id, _ = _file_job(owner)
    client.force_login(owner)
    url = _status(client, job_id)["file"]["download_url"]
    client.force_login(User.objects.create_user("bob", "bob@example.com", "pw-bob-12345"))
    assert client.get(url).status_code == 404
    client.logout()
    assert client.get(url).status_code == 404


def test_an_expired_or_altered_link_is_refused(client: Client, owner: User) -> None:
    job_id, result = _file_job(owner)
    client.force_login(owner)
    expired = files.download_url(job_id, result["file"], max_age=-1)
    response = client.get(expired)
    assert response.status_code == 403
    assert response.json() == {
        "error": "this download link has expired; ask the job's status for a new one",
        "expired": True,
    }
    fresh = files.download_url(job_id, result["file"])
    assert client.get(fresh[:-3] + "abc").status_code == 403
    assert client.get(fresh.split("?")[0]).status_code == 403
    # A link made for one job does not open another's file.
    other_id, _ = _file_job(owner)
    other_url = files.download_url(other_id, Job.objects.get(id=other_id).result["file"])
    token = other_url.split("?s=")[1]
    assert client.get(f"/api/jobs/{job_id}/file?s={token}").status_code == 403


def test_a_result_cannot_point_at_a_file_outside_its_own_folder(client: Client, owner: User) -> None:
    _, result = _file_job(owner)
    other = factories.job(State.SUCCEEDED, owner=f"auth.user:{owner.pk}")
    Job.objects.filter(id=other.id).update(result={"file": result["file"]})
    client.force_login(owner)
    assert _status(client, str(other.id))["file"] is None


def test_pruning_deletes_the_result_file_with_its_job(owner: User) -> None:
    job_id, result = _file_job(owner)
    path = Path(files.result_storage().path(result["file"]["name"]))
    assert path.exists()
    # Thirty days on.
    assert store.prune(retention={State.SUCCEEDED: 7 * 86400}, now=timezone.now() + timedelta(days=30)) == 1
    assert not Job.objects.filter(id=job_id).exists()
    assert not path.exists() and not path.parent.exists()


# --- a real worker: interim writes while the handler runs -------------------------------------


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("side_effects")
def test_progress_moves_while_the_handler_runs_never_backwards_and_reaches_100(
    tmp_path: Path, client: Client, owner: User
) -> None:
    from tests.support.workers import running_worker, wait_until

    result = tasks.half_then_wait.using(owner=owner).enqueue(200, "go-progress")
    client.force_login(owner)
    seen: list[int] = []

    def percent() -> int | None:
        progress = _status(client, result.id)["progress"]
        if progress is not None:
            seen.append(progress["percent"])
        return progress and progress["percent"]

    with running_worker(tmp_path, "--concurrency", "1"):
        # Written while the handler is still running (it waits for the test at half way).
        wait_until(lambda: percent() == 50, timeout=20, interval=0.02, message="progress at 50 %")
        assert _status(client, result.id)["status"] == "running"
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO test_side_effects (key) VALUES ('go-progress')")
        wait_until(lambda: _status(client, result.id)["status"] == "succeeded", timeout=20, interval=0.02)
    percent()
    assert seen == sorted(seen)
    assert seen[-1] == 100 and 50 in seen


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("side_effects")
def test_interim_writes_are_throttled_per_job(tmp_path: Path) -> None:
    from tests.support.workers import running_worker, wait_until

    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE OR REPLACE FUNCTION test_count_progress() RETURNS trigger AS $$
            BEGIN
                INSERT INTO test_side_effects (key) VALUES ('progress-write');
                RETURN NEW;
            END $$ LANGUAGE plpgsql;
            DROP TRIGGER IF EXISTS test_count_progress ON jobs_job;
            CREATE TRIGGER test_count_progress AFTER UPDATE OF progress ON jobs_job
                FOR EACH ROW WHEN (OLD.progress IS DISTINCT FROM NEW.progress)
                EXECUTE FUNCTION test_count_progress();
            """
        )
    try:
        result = tasks.hammer_progress.enqueue(30_000)
        with running_worker(tmp_path, "--concurrency", "1"):
            wait_until(lambda: Job.objects.get(id=result.id).state == State.SUCCEEDED, timeout=30)
        job = Job.objects.get(id=result.id)
        elapsed = job.result
        writes = side_effect_counts().get("progress-write", 0)
        # One interim write per 0.25 s at most (plus the first), and the outcome's.
        assert 1 <= writes <= int(elapsed / 0.25) + 2, (writes, elapsed)
        assert job.progress["done"] == 30_000 and job.progress["message"] == "done"
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS test_count_progress ON jobs_job")


def test_the_console_shows_a_running_jobs_progress(client: Client) -> None:
    job = factories.job(State.RUNNING, task_path="tests.tasks.progress.count_to")
    Job.objects.filter(id=job.id).update(progress={"done": 1200, "total": 5000, "message": "chunk 3"})
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw-root-12345"))
    shown = "1,200 of 5,000 (24 %) · chunk 3"
    assert shown in client.get("/admin/jobs/job/").content.decode()
    assert shown in client.get(f"/admin/jobs/job/{job.id}/change/").content.decode()


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("side_effects")
def test_a_running_job_cancelled_by_an_operator_stops_at_its_next_check(tmp_path: Path) -> None:
    from tests.support.workers import running_worker, wait_until

    job_id = tasks.work_until_cancelled.enqueue("cancel-me").id
    with running_worker(tmp_path, "--concurrency", "1"):
        wait_until(lambda: (Job.objects.get(id=job_id).progress or {}).get("done", 0) > 0, timeout=20)
        store.cancel(job_id)
        # The handler's next progress report (within a second of checks) raises JobCancelled.
        wait_until(lambda: side_effect_counts().get("cancel-me:stopped") == 1, timeout=15)
        # The cancel was a request: the attempt's outcome, written by the worker, ends it.
        wait_until(lambda: Job.objects.get(id=job_id).state == State.CANCELLED, timeout=15)
    job = Job.objects.get(id=job_id)
    assert job.state == State.CANCELLED and job.result is None
    # It stopped early: far from the last of its 600 steps.
    assert job.progress is None or job.progress["done"] < 500


def test_an_uncancelled_job_is_never_told_it_was(owner: User) -> None:
    result = tasks.count_to.using(owner=owner).enqueue(5)
    factories.run_due()
    assert Job.objects.get(id=result.id).state == State.SUCCEEDED
