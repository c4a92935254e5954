"""The web app's /metrics (bearer token, queue gauges from the table, request and enqueue
counters) and the trace middleware, on the real database; and how a worker counts and logs
each attempt: by the state its job ended in."""

from __future__ import annotations

import logging
import re
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs import metrics, store
from jobs.db import Connection
from jobs.models import Job
from jobs.observe import current_trace, job_trace, trace_from_headers, trace_id_of
from jobs.states import State
from jobs.worker import attempt
from jobs.worker.attempt import Attempts
from jobs.worker.feeder import Feeder
from jobs.worker.joblog import JobLog
from jobs.worker.lane_rows import LaneRows
from jobs.worker.metrics import Tally
from jobs.worker.settlement import Settlement, reaped_as, write_settlement
from tests.support import factories
from tests.tasks import observed

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-scrape-token"
CANARY = "canary.observer+web@example.com"


def scrape(client: Client | None = None, token: str | None = TOKEN) -> tuple[int, str]:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    response = (client or Client()).get("/metrics", **headers)
    return response.status_code, response.content.decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def gauge(text: str, queue: str, state: str) -> float:
    return samples(text)[("jobs_queue_jobs", (("queue", queue), ("state", state)))]


def test_metrics_are_off_without_a_token() -> None:
    with override_settings(METRICS_TOKEN=""):
        assert scrape()[0] == 404
        assert scrape(token="anything")[0] == 404


@override_settings(METRICS_TOKEN=TOKEN)
def test_a_missing_or_wrong_token_is_refused() -> None:
    assert scrape(token=None)[0] == 401
    assert scrape(token="wrong")[0] == 401
    assert scrape(token="")[0] == 401
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    status, text = scrape()
    assert status == 200 and "jobs_queue_jobs" in text


@override_settings(METRICS_TOKEN=TOKEN)
def test_queue_gauges_count_the_table_at_scrape_time() -> None:
    now = timezone.now()
    for _ in range(3):
        factories.job(state=State.QUEUED, queue_name="email", run_at=now - timedelta(seconds=90))
    factories.job(state=State.SCHEDULED, queue_name="email", run_at=now + timedelta(hours=1))
    factories.job(state=State.SCHEDULED, queue_name="email", attempt=1, run_at=now + timedelta(minutes=1))
    factories.job(state=State.RUNNING, queue_name="default")
    factories.job(state=State.DEAD, queue_name="default")
    factories.job(state=State.SUCCEEDED, queue_name="default")
    status, text = scrape()
    assert status == 200
    assert gauge(text, "email", "queued") == 3
    assert gauge(text, "email", "scheduled") == 1
    assert gauge(text, "email", "retrying") == 1
    assert gauge(text, "default", "running") == 1
    assert gauge(text, "default", "dead") == 1
    # Configured but empty: listed with zeros, so alerts see 0 rather than nothing.
    assert gauge(text, "low", "queued") == 0
    age = samples(text)[("jobs_queue_oldest_due_age_seconds", (("queue", "email"),))]
    assert 89 <= age < 600
    assert samples(text)[("jobs_queue_oldest_due_age_seconds", (("queue", "low"),))] == 0
    assert samples(text)[("jobs_workers_alive", ())] == 0
    # Computed now, not cached: one more job shows in the next scrape.
    factories.job(state=State.QUEUED, queue_name="email")
    assert gauge(scrape()[1], "email", "queued") == 4
    assert [entry["queue"] for entry in metrics.queue_gauges()] == sorted(
        entry["queue"] for entry in metrics.queue_gauges()
    )


@override_settings(METRICS_TOKEN=TOKEN)
def test_requests_and_enqueues_are_counted_with_bounded_labels_only() -> None:
    client = Client()
    before = samples(scrape(client)[1])
    client.get("/no/such/page/" + CANARY)
    client.get("/")
    observed.greet.enqueue(CANARY)
    text = scrape(client)[1]
    after = samples(text)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("jobs_http_requests_total", method="GET", view="unmatched", status="404") == 1
    assert grew("jobs_http_requests_total", method="GET", view="home", status="200") >= 1
    assert grew("jobs_enqueued_total", task="tests.tasks.observed.greet") == 1
    assert CANARY not in text and "example.com" not in text
    uuid = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
    for (name, labels), _ in after.items():
        assert name.startswith("jobs_"), name
        for label, value in labels:
            assert label in {"task", "queue", "state", "method", "view", "status", "le"}, (name, label)
            assert not uuid.search(value), (name, label, value)


def test_a_request_traceparent_is_returned_and_carried_by_its_jobs() -> None:
    client = Client()
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    response = client.get("/", HTTP_TRACEPARENT=traceparent)
    assert response["X-Request-ID"] == "0af7651916cd43dd8448eb211c80319c"
    response = client.get("/", HTTP_X_REQUEST_ID="req-42.abc")
    assert response["X-Request-ID"] == "req-42.abc"
    # Neither: a new W3C-shaped trace id per request.
    first, second = (client.get("/")["X-Request-ID"] for _ in range(2))
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


def test_malformed_trace_headers_start_a_new_trace() -> None:
    for traceparent in (
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "garbage",
    ):
        assert re.fullmatch(r"[0-9a-f]{32}", trace_from_headers(traceparent, None))
    for request_id in ("has space", "x" * 200, "new\nline", "semi;colon"):
        made = trace_from_headers(None, request_id)
        assert made != request_id and re.fullmatch(r"[0-9a-f]{32}", made)


def test_jobs_enqueued_in_a_trace_carry_it_and_explicit_ids_win() -> None:
    token = current_trace.set("feedfacefeedfacefeedfacefeedface")
    try:
        joined = observed.greet.enqueue(CANARY)
        own = observed.greet.using(trace_id="my-own-trace").enqueue(CANARY)
    finally:
        current_trace.reset(token)
    alone = observed.greet.enqueue(CANARY)
    assert Job.objects.get(id=joined.id).trace_id == "feedfacefeedfacefeedfacefeedface"
    assert Job.objects.get(id=own.id).trace_id == "my-own-trace"
    # Outside any trace a job starts its own: its id, which its row does not repeat.
    row = Job.objects.get(id=alone.id)
    assert (row.trace_id, job_trace(row.trace_id, row.id)) == ("", alone.id.replace("-", ""))
    stored = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_id_of(stored) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of("req-42") == "req-42"


@pytest.mark.django_db(transaction=True)
def test_a_worker_counts_and_logs_each_attempt_by_the_state_its_job_ended_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    greet = "tests.tasks.observed.greet"
    ids = [uuid.UUID(observed.greet.enqueue(CANARY).id) for _ in range(4)]
    config = factories.worker_config()
    token = uuid.uuid4()
    tally = Tally()
    log = JobLog(tally, defer_failures=True)
    db = Connection("default", name="test-metrics")
    lane = LaneRows("threads", entries=list(range(4)))
    feeder = Feeder(config, token=token, db=db, lanes={"threads": lane}, log=log)
    try:
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        rows = {row.id: row for row in lane.waiting}
        failed_after_cancel, succeeded_after_cancel, failed, succeeded = (rows[i] for i in ids)
        # An operator cancels two of them while they run: a request, the jobs still running.
        store.cancel(failed_after_cancel.id)
        store.cancel(succeeded_after_cancel.id)
        attempts = Attempts(config, token=token, log=log)
        started = time.monotonic()

        def success(row: store.Claimed) -> dict[str, object]:
            begun = attempt.begin(attempts, row, started)
            assert isinstance(begun, attempt.Begun)
            return dict(attempts.succeeded(begun, "hello"))

        with caplog.at_level(logging.INFO, logger="jobs.job"):
            outcomes = [
                attempts.failed(failed_after_cancel, RuntimeError("boom"), started),
                success(succeeded_after_cancel),
                attempts.failed(failed, RuntimeError("boom"), started),
                success(succeeded),
            ]
            # A success is counted at once; the others wait for their outcome's write.
            assert tally.finished == {(greet, "default", "succeeded"): 2}
            feeder.outbox.write(outcomes, [])  # type: ignore[arg-type]
    finally:
        feeder.close()
        db.drop()
    states = dict(Job.objects.values_list("id", "state"))
    assert [states[i] for i in ids] == [State.CANCELLED, State.SUCCEEDED, State.SCHEDULED, State.SUCCEEDED]
    assert tally.finished == {
        (greet, "default", "cancelled"): 1,
        (greet, "default", "succeeded"): 2,
        (greet, "default", "retried"): 1,
    }
    assert log.deferred == {}
    lines = {line.split()[0]: line for line in caplog.messages if line.startswith("job=")}
    assert "outcome=cancelled" in lines[f"job={failed_after_cancel.id}"]
    assert "outcome=retry" in lines[f"job={failed.id}"]
    assert "outcome=succeeded" in lines[f"job={succeeded_after_cancel.id}"]


@pytest.mark.django_db
@pytest.mark.parametrize("cancel_requested", [True, False], ids=["cancel-requested", "no-request"])
def test_an_attempt_the_reaper_or_a_settlement_takes_back_counts_as_the_state_its_job_ended_in(
    cancel_requested: bool,
) -> None:
    # The housekeeper counts each started attempt a reaper took back, and a dead executor's
    # settlement each one it left: 'cancelled' when its job's cancel was requested while
    # it ran (the job ends cancelled, not retried), else the loss that ended it.
    lost, died = uuid.uuid4(), uuid.uuid4()
    jobs = {token: observed.greet.enqueue("ann@example.com") for token in (lost, died)}
    t0 = timezone.now()
    with connection.cursor() as cursor:
        for token in (lost, died):
            [row] = store.claim(cursor, worker=token, queues=["default"], limit=1, now=t0)
            store.record_outcomes(cursor, worker=token, outcomes=[], started=[(row.id, row.attempt)], now=t0)
    if cancel_requested:
        Job.objects.filter(id__in=[job.id for job in jobs.values()]).update(cancel_requested_at=t0)
    with connection.cursor() as cursor:
        settlement = Settlement(seq=1, token=died, failed=[], reason="process_died")
        counted = write_settlement(cursor, factories.worker_config(), settlement)
        assert [label for _, _, label in counted] == ["cancelled" if cancel_requested else "process_died"]
        reaped = store.reap(cursor, backoff_base=1.0, backoff_cap=10.0, now=t0 + timedelta(seconds=3600))
        assert [reaped_as(row, "lease_lost") for row in reaped] == [
            "cancelled" if cancel_requested else "lease_lost"
        ]
    ended = {Job.objects.get(id=job.id).state for job in jobs.values()}
    assert ended == ({State.CANCELLED} if cancel_requested else {State.SCHEDULED})
