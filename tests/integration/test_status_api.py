import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from jobs.models import Job
from jobs.states import State
from tests.support import factories
from tests.tasks import basic


@pytest.fixture
def owner(db: None) -> User:
    return User.objects.create_user("owner", "owner@example.com", "pw-owner-123")


@pytest.mark.django_db
def test_owner_sees_status_without_the_payload(client: Client, owner: User) -> None:
    result = basic.record.using(owner=owner).enqueue("secret-payload-marker")
    client.force_login(owner)
    body = client.get(f"/api/jobs/{result.id}").json()
    assert body["id"] == result.id
    assert body["status"] == "queued"
    assert body["task_status"] == "READY"
    assert body["task"] == "tests.tasks.basic.record"
    assert body["queue"] == "default"
    assert body["trace_id"] == uuid.UUID(result.id).hex  # its own trace: it joined none
    assert body["attempts"] == 0
    assert body["max_attempts"] == 5
    assert body["started_at"] is None and body["finished_at"] is None
    assert body["result"] is None and body["last_error"] is None
    assert "args" not in body and "kwargs" not in body
    assert "secret-payload-marker" not in str(body)


@pytest.mark.django_db
def test_a_private_job_is_404_to_anyone_but_its_owner_and_staff(client: Client, owner: User) -> None:
    result = basic.record.using(owner=owner).enqueue(1)
    assert client.get(f"/api/jobs/{result.id}").status_code == 404
    client.force_login(User.objects.create_user("other", "other@example.com", "pw-other-123"))
    assert client.get(f"/api/jobs/{result.id}").status_code == 404
    client.force_login(User.objects.create_user("ops", "ops@example.com", "pw-ops-1234", is_staff=True))
    assert client.get(f"/api/jobs/{result.id}").json()["status"] == "queued"
    # A job nobody owns (enqueued from the shell, a schedule) is for staff only.
    system = basic.record.enqueue(2)
    assert client.get(f"/api/jobs/{system.id}").status_code == 200
    client.logout()
    assert client.get(f"/api/jobs/{system.id}").status_code == 404


@pytest.mark.django_db
def test_a_public_job_shows_its_bare_status_to_anyone(client: Client, owner: User) -> None:
    job = factories.job(State.DEAD, max_attempts=1, owner="auth.user:999", public=True)
    Job.objects.filter(id=job.id).update(last_error="smtp said no to someone@example.com")
    body = client.get(f"/api/jobs/{job.id}").json()
    assert body["status"] == "dead" and body["task_status"] == "FAILED"
    assert "last_error" not in body and "result" not in body
    assert "someone@example.com" not in str(body)


@pytest.mark.django_db
def test_status_of_finished_jobs_shows_result_or_last_error(client: Client, owner: User) -> None:
    ok = factories.job(State.SUCCEEDED, result=42, owner=f"auth.user:{owner.pk}")
    bad = factories.job(State.DEAD, max_attempts=1, owner=f"auth.user:{owner.pk}")
    Job.objects.filter(id=bad.id).update(last_error="smtp said no")
    client.force_login(owner)
    done = client.get(f"/api/jobs/{ok.id}").json()
    assert done["status"] == "succeeded" and done["result"] == 42 and done["finished_at"]
    failed = client.get(f"/api/jobs/{bad.id}").json()
    assert failed["status"] == "dead" and failed["last_error"] == "smtp said no"
    assert "Traceback" not in str(failed)


@pytest.mark.django_db
def test_an_expired_job_reports_expired(client: Client, owner: User) -> None:
    result = basic.record.using(owner=owner, expires_at=timezone.now() + timedelta(seconds=5)).enqueue(1)
    factories.run_due(now=timezone.now() + timedelta(seconds=10))
    client.force_login(owner)
    body = client.get(f"/api/jobs/{result.id}").json()
    assert body["status"] == "expired" and body["task_status"] == "FAILED"
    assert body["attempts"] == 0 and body["last_error"].startswith("expired: not started before")


@pytest.mark.django_db
def test_unknown_or_malformed_id_is_404(client: Client) -> None:
    assert client.get(f"/api/jobs/{uuid.uuid4()}").status_code == 404
    assert client.get("/api/jobs/not-a-uuid").status_code == 404
