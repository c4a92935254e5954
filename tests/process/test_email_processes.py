"""Email and cooldowns across real processes: runworker subprocesses sending to the SMTP
server on loopback, and two web server processes sharing one cooldown."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from accounts.tasks import send_signup_email
from jobs.models import Job
from jobs.states import State
from notifications.models import DeliveryStatus, EmailDelivery
from tests.conftest import ROOT, subprocess_env
from tests.support.accounts import unverified_user
from tests.support.mail import free_port, link_in
from tests.support.workers import running_worker, wait_until

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_two_workers_running_jobs_for_one_message_send_it_once(tmp_path, smtp_sink) -> None:
    user = unverified_user(username="ann", email="ann@example.com")
    # Four jobs for one message (the same link generation), as duplicated requests make.
    send_signup_email.using(public=True).enqueue_many([((user.pk,), {})] * 4)
    env = {"EMAIL_URL": smtp_sink.url, "SITE_URL": "http://testserver"}
    with (
        running_worker(tmp_path, "--queues", "email", "--concurrency", "2", name="a", **env),
        running_worker(tmp_path, "--queues", "email", "--concurrency", "2", name="b", **env),
    ):
        wait_until(
            lambda: Job.objects.filter(state=State.SUCCEEDED).count() == 4, timeout=30, message="4 jobs done"
        )
    [message] = smtp_sink.wait_for("ann@example.com")
    assert link_in(message, "/accounts/verify/").startswith("http://testserver/accounts/verify/")
    assert len(smtp_sink.messages()) == 1
    delivery = EmailDelivery.objects.get()
    assert delivery.status == DeliveryStatus.SENT and delivery.attempts == 1


@contextlib.contextmanager
def web_server(tmp_path: Path, name: str) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / f"{name}.log").open("w")
    process = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(url), timeout=60, message=f"gunicorn {name} on {url}")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/", timeout=5):  # noqa: S310 - our own loopback server
            return True
    except OSError:  # refused while starting, or a slow first request (URLError, TimeoutError)
        return False


def resend(url: str, email: str) -> tuple[int, dict[str, object], str | None]:
    request = urllib.request.Request(  # noqa: S310 - our own loopback server
        f"{url}/api/signup/resend",
        data=json.dumps({"email": email}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, json.loads(response.read()), response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers.get("Retry-After")


def test_cooldowns_hold_across_two_web_server_processes(tmp_path) -> None:
    unverified_user(username="bo", email="bo@example.com")
    with web_server(tmp_path, "one") as one, web_server(tmp_path, "two") as two:
        status, body, _ = resend(one, "bo@example.com")
        assert status == 202 and body["status"] == "queued"
        # The same address through the other process: its cooldown is shared.
        status, body, retry_after = resend(two, "BO@example.com")
        assert status == 429 and retry_after is not None and int(retry_after) > 0
        # Another address from the same client IP, through the other process: the IP's.
        status, _, retry_after = resend(two, "someone@example.com")
        assert status == 429 and retry_after is not None
    assert Job.objects.filter(task_path="accounts.tasks.send_signup_email").count() == 1
