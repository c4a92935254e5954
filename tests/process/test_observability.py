"""A real ``runworker`` with ``--metrics-port``: its /metrics against what ran, its JSON log
lines, the trace of a web request followed into its job, and OpenTelemetry spans."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs import store
from jobs.models import Job
from jobs.observe import current_trace
from jobs.states import State
from tests.conftest import ROOT, subprocess_env
from tests.support import factories
from tests.support.mail import free_port
from tests.support.servers import OtlpReceiver
from tests.support.workers import running_worker, start_marked, wait_until
from tests.tasks import basic, observed

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

CANARY = "canary.observer+metrics@example.com"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
JOB_FIELDS = {"event", "job_id", "task", "queue", "attempt", "trace_id", "duration_ms", "outcome"}


def scrape(port: int) -> str:
    with _get(f"http://127.0.0.1:{port}/metrics", {}) as response:
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def finished(text: str) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in samples(text).items():
        if name == "jobs_finished_total":
            label = dict(labels)
            counts[(label["task"].rpartition(".")[2], label["outcome"])] += int(value)
    return counts


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def test_worker_metrics_count_what_ran_and_its_json_logs_follow_the_trace(tmp_path, smtp_sink) -> None:
    for _ in range(6):
        observed.greet.enqueue(CANARY)
    for _ in range(2):
        observed.flaky.enqueue(CANARY)
    observed.doomed.enqueue(CANARY)
    token = current_trace.set(TRACE)
    try:
        # Enqueued in a trace (as a request would): the child job it enqueues joins it.
        parent = observed.fan_out.enqueue(CANARY)
    finally:
        current_trace.reset(token)
    # Past its not-started deadline: the claim ends it expired.
    observed.greet.using(expires_at=timezone.now() - timedelta(seconds=5)).enqueue(CANARY)
    # Held by a worker that vanished an hour ago: this worker's reaper takes it back, then runs it.
    factories.job(State.RUNNING, now=timezone.now() - timedelta(hours=1))
    # Cancelled while it runs: it goes on to succeed, and that stands.
    napping = observed.nap.enqueue(CANARY, 2.0)
    observed.overrun.enqueue(CANARY)
    # A web request with a W3C traceparent: its job carries the request's trace id.
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    response = Client().post(
        "/api/signup",
        json.dumps(
            {"email": "ann@example.com", "username": "ann", "password": "correct horse battery staple"}
        ),
        content_type="application/json",
        HTTP_TRACEPARENT=traceparent,
    )
    assert response["X-Request-ID"] == "0af7651916cd43dd8448eb211c80319c"
    request_jobs = list(Job.objects.filter(trace_id="0af7651916cd43dd8448eb211c80319c"))
    assert request_jobs, response.content

    port = free_port()
    env = {"LOG_FORMAT": "json", "EMAIL_URL": smtp_sink.url, "SITE_URL": "http://testserver"}
    with running_worker(tmp_path, "--concurrency", "2", "--metrics-port", str(port), **env) as worker:
        wait_until(lambda: start_marked(napping.id), timeout=20, message="the nap to start")
        store.cancel(napping.id)

        def all_finished() -> bool:
            return not Job.objects.filter(state__in=[State.QUEUED, State.SCHEDULED, State.RUNNING]).exists()

        wait_until(all_finished, timeout=40, message="every job finished")
        # The nap's handler goes on to its end after the cancel, and its success stands.
        wait_until(lambda: "nap" in _finished_tasks(worker.log()), timeout=10, message="the nap's end")
        # Then the jobs that take an executor down with them, alone (they would take the
        # jobs running beside them too): one killed for its time limit, one that exits.
        basic.spin_forever.using(max_attempts=1).enqueue()
        basic.exit_process.using(max_attempts=1).enqueue()
        wait_until(all_finished, timeout=40, message="the killed jobs finished")
        expected = {
            ("greet", "succeeded"): 7,
            ("fan_out", "succeeded"): 1,
            ("flaky", "retried"): 2,
            ("flaky", "succeeded"): 2,
            ("doomed", "dead"): 1,
            ("spin_forever", "time_limit"): 1,
            ("overrun", "time_limit"): 1,
            ("exit_process", "process_died"): 1,
            ("nap", "succeeded"): 1,
            ("greet", "expired"): 1,
            ("noop", "lease_lost"): 1,
            ("noop", "succeeded"): 1,
        }

        def settled() -> str | None:
            text = scrape(port)
            counts = finished(text)
            done = all(counts[key] == n for key, n in expected.items())
            return text if done and value(text, "jobs_worker_executors_alive") == 2 else None

        text = wait_until(settled, timeout=15, message="the counts in /metrics")
        counts = finished(text)
        for key, n in expected.items():
            assert counts[key] == n, (key, counts)
        # Attempts that ran to an outcome: their durations and waits (killed ones have none).
        not_run = ("time_limit", "process_died", "cancelled", "expired", "lease_lost")
        ran = sum(n for (_, outcome), n in expected.items() if outcome not in not_run) + 1  # overrun
        durations = sum(
            v for (name, _), v in samples(text).items() if name == "jobs_run_duration_seconds_count"
        )
        waits = sum(v for (name, _), v in samples(text).items() if name == "jobs_queue_wait_seconds_count")
        assert durations >= ran and waits >= ran
        assert value(text, "jobs_run_duration_seconds_count", task="tests.tasks.observed.flaky") == 4
        assert value(text, "jobs_enqueued_total", task="tests.tasks.observed.greet") == 1
        assert value(text, "jobs_worker_jobs_in_hand") == 0
        assert value(text, "jobs_worker_last_heartbeat_timestamp_seconds") > 1e9
        audit(text)
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0
        output = worker.log()

    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert CANARY not in output
    jobs = [line for line in lines if line.get("logger") == "jobs.job"]
    assert len(jobs) >= 13
    for line in jobs:
        assert set(line) >= JOB_FIELDS, line
    doomed = next(line for line in jobs if line["task"].endswith(".doomed"))
    assert (doomed["outcome"], doomed["error_type"], doomed["attempt"]) == ("dead", "RuntimeError", 1)
    flaky = [line for line in jobs if line["task"].endswith(".flaky")]
    assert sorted(line["outcome"] for line in flaky) == ["retry", "retry", "succeeded", "succeeded"]
    # The trace: the parent job, and the job it enqueued, logged under the enqueuer's trace.
    traced = [line for line in jobs if line["trace_id"] == TRACE]
    assert {line["task"].rpartition(".")[2] for line in traced} == {"fan_out", "greet"}
    assert Job.objects.get(id=parent.id).result == TRACE
    # The request's jobs, logged by the worker under the request's trace id.
    request_lines = [line for line in jobs if line["trace_id"] == "0af7651916cd43dd8448eb211c80319c"]
    assert {line["job_id"] for line in request_lines} == {str(job.id) for job in request_jobs}
    # The supervisor's and housekeeper's lines are JSON too, with their event lifted out.
    assert {"worker_started", "time_limit", "executor_lost"} <= {line.get("event") for line in lines}


def _finished_tasks(log: str) -> set[str]:
    """Tasks whose per-job line is in the log (JSON lines)."""
    tasks = set()
    for line in log.splitlines():
        if '"logger": "jobs.job"' in line:
            tasks.add(json.loads(line)["task"].rpartition(".")[2])
    return tasks


def audit(text: str) -> None:
    """Bounded labels only: no id, no argument, nothing personal."""
    assert CANARY not in text and "example.com" not in text
    for (name, labels), _ in samples(text).items():
        assert name.startswith("jobs_"), name
        for label, label_value in labels:
            assert label in {"task", "queue", "outcome", "le"}, (name, label)
            assert not UUID.search(label_value), (name, label, label_value)


def test_the_web_apps_metrics_sum_every_gunicorn_process(tmp_path) -> None:
    port = free_port()
    (tmp_path / "prom").mkdir()
    env = subprocess_env(
        METRICS_TOKEN="scrape-me", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prom"), LOG_FORMAT="json"
    )
    log = (tmp_path / "web.log").open("w")
    web = subprocess.Popen(
        [
            *(str(ROOT / ".venv" / "bin" / "gunicorn"), "config.wsgi", "-c", "python:config.gunicorn"),
            *("--bind", f"127.0.0.1:{port}", "--workers", "2", "--access-logfile", "-"),
            "--no-control-socket",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(f"{url}/") == 200, timeout=60, message="gunicorn answering")
        assert _status(f"{url}/metrics") == 401
        before = _home_requests(url)
        for _ in range(20):
            with _get(f"{url}/", {"X-Request-ID": "from-the-load-balancer"}) as response:
                assert response.headers["X-Request-ID"] == "from-the-load-balancer"
        # Whichever process answers the scrape, it counts both processes' requests.
        for _ in range(4):
            assert _home_requests(url) - before == 20
    finally:
        web.send_signal(signal.SIGTERM)
        web.wait(timeout=20)
        log.close()
    lines = [json.loads(line) for line in (tmp_path / "web.log").read_text().splitlines() if line.strip()]
    assert any(line.get("logger") == "gunicorn.access" for line in lines)


def _get(url: str, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - our own loopback server
    return urllib.request.urlopen(request, timeout=10)  # noqa: S310


def _status(url: str) -> int:
    try:
        with _get(url, {}) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def _home_requests(url: str) -> float:
    with _get(f"{url}/metrics", {"Authorization": "Bearer scrape-me"}) as response:
        text = response.read().decode()
    assert "jobs_queue_jobs" in text
    return value(text, "jobs_http_requests_total", method="GET", view="home", status="200")


def test_a_taken_port_costs_the_metrics_not_the_jobs_and_a_bad_one_is_refused(tmp_path) -> None:
    observed.greet.enqueue(CANARY)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with running_worker(tmp_path, "--concurrency", "1", "--burst", "--metrics-port", str(port)) as worker:
            assert worker.wait(timeout=30) == 0
            output = worker.log()
    assert "event=metrics_unavailable" in output
    assert Job.objects.get().state == State.SUCCEEDED
    # Without a port: nothing served.
    observed.greet.enqueue(CANARY)
    with running_worker(tmp_path, "--concurrency", "1", "--burst", name="plain") as worker:
        assert worker.wait(timeout=30) == 0
        assert "metrics_serving" not in worker.log()
    refused = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--metrics-port", "70000"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "--metrics-port must be a port number" in refused.stderr


def test_opentelemetry_spans_follow_a_request_into_its_job_and_each_attempt(tmp_path, smtp_sink) -> None:
    env = {"OTEL_TRACES_EXPORTER": "console", "LOG_FORMAT": "json"}
    # A request (a signup: its email job) under an incoming traceparent, and a job enqueued
    # outside any request that fails once.
    code = (
        "import django, json; django.setup(); "
        "from django.test import Client; from tests.tasks import observed; "
        "Client().post('/api/signup', json.dumps({'email': 'bo@example.com', 'username': 'bo', "
        "'password': 'correct horse 42 staple'}), content_type='application/json', "
        f"HTTP_TRACEPARENT='00-{TRACE}-00f067aa0ba902b7-01'); "
        "observed.flaky.enqueue('x')"
    )
    enqueue = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=subprocess_env(ALLOWED_HOSTS="testserver", **env),
        capture_output=True,
        text=True,
        check=True,
    )
    spans = _spans(enqueue.stdout)
    [server] = [s for s in spans if s["kind"] == "SpanKind.SERVER"]
    assert (server["context"]["trace_id"], server["parent_id"]) == (f"0x{TRACE}", "0x00f067aa0ba902b7")
    assert server["name"] == "POST api/signup"
    producers = {s["attributes"]["jobs.task"]: s for s in spans if s["kind"] == "SpanKind.PRODUCER"}
    signup = producers["accounts.tasks.send_signup_email"]
    assert signup["parent_id"] == server["context"]["span_id"]
    jobs = {job.task_path: job for job in Job.objects.all()}
    assert set(jobs) == set(producers)
    for task, job in jobs.items():
        assert job.trace_id.startswith("00-") and producers[task]["context"]["span_id"][2:] in job.trace_id
    assert TRACE in jobs["accounts.tasks.send_signup_email"].trace_id

    worker_env = {**env, "EMAIL_URL": smtp_sink.url, "SITE_URL": "http://testserver"}
    with running_worker(tmp_path, "--concurrency", "1", **worker_env) as worker:
        wait_until(
            lambda: Job.objects.filter(state=State.SUCCEEDED).count() == 2, timeout=20, message="both jobs"
        )
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0
        output = worker.log()
    consumers = [s for s in _spans(output) if s["kind"] == "SpanKind.CONSUMER"]
    assert len(consumers) == 3  # the signup email; flaky's failed attempt and its retry
    for span in consumers:
        task = span["attributes"]["jobs.task"]
        producer = producers[task]
        assert span["context"]["trace_id"] == producer["context"]["trace_id"]
        assert span["parent_id"] == producer["context"]["span_id"]
        assert span["links"][0]["context"]["span_id"] == producer["context"]["span_id"]
        assert span["attributes"]["messaging.system"] == "jobqueue"
        assert span["attributes"]["messaging.operation.type"] == "process"
        assert span["attributes"]["messaging.destination.name"] == jobs[task].queue_name
        assert span["attributes"]["messaging.message.id"] == str(jobs[task].id)
    flaky = [s for s in consumers if s["attributes"]["jobs.task"] == "tests.tasks.observed.flaky"]
    assert sorted(s["status"]["status_code"] for s in flaky) == ["ERROR", "UNSET"]


def test_spans_reach_an_otlp_collector_from_the_producer_and_the_worker(tmp_path) -> None:
    receiver = OtlpReceiver()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "shop"}
        code = "import django; django.setup(); from tests.tasks import observed; observed.flaky.enqueue('x')"
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(**env), check=True)
        # Sent in a batch when the producing process exits.
        [producer] = wait_until(lambda: receiver.received(), timeout=10, message="the producer span")
        [job] = Job.objects.all()
        assert (producer["service"], producer["kind"], producer["name"]) == (
            "shop",
            "SPAN_KIND_PRODUCER",
            "send default",
        )
        assert producer["attributes"]["messaging.message.id"] == str(job.id)
        assert job.trace_id.startswith(f"00-{producer['trace_id']}-{producer['span_id']}-")

        with running_worker(tmp_path, "--concurrency", "1", **env) as worker:
            wait_until(
                lambda: Job.objects.filter(state=State.SUCCEEDED).exists(), timeout=20, message="the job"
            )
            worker.signal(signal.SIGTERM)
            assert worker.wait(timeout=20) == 0
        # The executor's batch is flushed before it leaves (by os._exit, which skips atexit).
        wait_until(lambda: len(receiver.received()) == 3, timeout=10, message="both attempts' spans")
    finally:
        receiver.stop()
    attempts = sorted(
        (s for s in receiver.received() if s["kind"] == "SPAN_KIND_CONSUMER"),
        key=lambda s: s["attributes"]["jobs.attempt"],
    )
    assert [(s["attributes"]["jobs.attempt"], s["status"]) for s in attempts] == [
        (1, "STATUS_CODE_ERROR"),
        (2, "STATUS_CODE_UNSET"),
    ]
    for span in attempts:
        assert (span["service"], span["name"]) == ("shop", "process default")
        assert (span["trace_id"], span["parent_id"], span["links"]) == (
            producer["trace_id"],
            producer["span_id"],
            [producer["span_id"]],
        )
        assert span["attributes"]["messaging.message.id"] == str(job.id)


def test_without_the_variables_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import django, sys; django.setup(); "
        "from django.test import Client; from tests.tasks import observed; "
        "observed.greet.enqueue('x'); Client().get('/'); "
        "from jobs.worker import lanes, supervisor; "
        "print('loaded' if any(m.startswith('opentelemetry') for m in sys.modules) else 'clean')"
    )
    env = subprocess_env(DJANGO_SETTINGS_MODULE="tests.settings")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "clean", result.stderr


def _spans(output: str) -> list[dict[str, Any]]:
    spans = []
    for line in output.splitlines():
        if line.startswith("{") and '"kind": "SpanKind.' in line:
            spans.append(json.loads(line))
    return spans


def test_the_scheduler_logs_json_too(tmp_path) -> None:
    log = (tmp_path / "scheduler.log").open("w")
    scheduler = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runscheduler"],
        cwd=ROOT,
        env=subprocess_env(LOG_FORMAT="json", JOBS_LOG_LEVEL="INFO"),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: "scheduler_started" in (tmp_path / "scheduler.log").read_text(),
            timeout=30,
            message="the scheduler's start line",
        )
    finally:
        scheduler.send_signal(signal.SIGTERM)
        scheduler.wait(timeout=20)
        log.close()
    text = (tmp_path / "scheduler.log").read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    events = {line.get("event") for line in lines}
    assert {"scheduler_started", "scheduler_stopped"} <= events
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
