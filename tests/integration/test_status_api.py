import uuid

import pytest
from django.test import Client

from jobs.models import Job
from jobs.states import State
from tests import factories
from tests.tasks import basic


@pytest.mark.django_db
def test_status_of_a_queued_job_hides_the_payload(client: Client) -> None:
    result = basic.record.enqueue("secret-payload-marker")
    body = client.get(f"/api/jobs/{result.id}").json()
    assert body["id"] == result.id
    assert body["status"] == "queued"
    assert body["task_status"] == "READY"
    assert body["task"] == "tests.tasks.basic.record"
    assert body["queue"] == "default"
    assert body["trace_id"] == Job.objects.get(id=result.id).trace_id
    assert body["attempts"] == 0
    assert body["max_attempts"] == 5
    assert body["started_at"] is None and body["finished_at"] is None
    assert body["result"] is None and body["last_error"] is None
    assert "args" not in body and "kwargs" not in body
    assert "secret-payload-marker" not in str(body)


@pytest.mark.django_db
def test_status_of_finished_jobs_shows_result_or_last_error(client: Client) -> None:
    ok = factories.job(State.SUCCEEDED, result=42)
    bad = factories.job(State.DEAD, max_attempts=1)
    Job.objects.filter(id=bad.id).update(last_error="smtp said no")
    done = client.get(f"/api/jobs/{ok.id}").json()
    assert done["status"] == "succeeded" and done["result"] == 42 and done["finished_at"]
    failed = client.get(f"/api/jobs/{bad.id}").json()
    assert failed["status"] == "dead" and failed["last_error"] == "smtp said no"
    assert "Traceback" not in str(failed)


@pytest.mark.django_db
def test_unknown_or_malformed_id_is_404(client: Client) -> None:
    assert client.get(f"/api/jobs/{uuid.uuid4()}").status_code == 404
    assert client.get("/api/jobs/not-a-uuid").status_code == 404
