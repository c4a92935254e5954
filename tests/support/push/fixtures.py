"""Fixtures for the push tests: the fake APNs and FCM servers (one pair per test session,
reset for each test), settings pointing the real providers at them, and devices."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from jobs.models import Job
from notifications.push import services
from notifications.push.models import Device, PushDelivery
from notifications.push.providers import locmem, reset_backend
from tests.support.factories import run_due

from .fake_apns import FakeAPNs
from .fake_fcm import FakeFCM
from .servers import (
    APNS_KEY_ID,
    APNS_TEAM_ID,
    APNS_TOPIC,
    Credentials,
    ServerThread,
    free_port,
    make_credentials,
)

PLATFORM_BACKEND = "notifications.push.providers.platforms.PlatformBackend"
LOCMEM_BACKEND = "notifications.push.providers.locmem.LocmemBackend"


@dataclass
class PushServers:
    apns: FakeAPNs
    fcm: FakeFCM
    apns_url: str
    fcm_url: str
    credentials: Credentials

    def settings(self) -> dict[str, Any]:
        return {
            "BACKEND": PLATFORM_BACKEND,
            "APNS_BASE_URL": self.apns_url,
            "APNS_KEY_FILE": str(self.credentials.apns_key_file),
            "APNS_KEY_ID": APNS_KEY_ID,
            "APNS_TEAM_ID": APNS_TEAM_ID,
            "APNS_TOPIC": APNS_TOPIC,
            "FCM_BASE_URL": self.fcm_url,
            "FCM_CREDENTIALS_FILE": str(self.credentials.fcm_credentials_file),
            "CA_BUNDLE": str(self.credentials.ca_file),
            "CONNECT_TIMEOUT": 5.0,
            "REQUEST_TIMEOUT": 10.0,
            "MAX_ATTEMPTS": 8,
        }

    def env(self) -> dict[str, str]:
        """The same, as the PUSH_* environment of a runworker subprocess."""
        return {f"PUSH_{name}": str(value) for name, value in self.settings().items()}

    def reset(self) -> None:
        self.apns.reset()
        self.fcm.reset()


@pytest.fixture(scope="session")
def push_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PushServers]:
    directory = tmp_path_factory.mktemp("push")
    fcm_port = free_port()
    fcm_url = f"https://127.0.0.1:{fcm_port}"
    credentials = make_credentials(directory, token_uri=f"{fcm_url}/token")
    apns = FakeAPNs(credentials.apns_public_key)
    fcm = FakeFCM(credentials.fcm_public_key, token_url=f"{fcm_url}/token")
    apns_server = ServerThread(apns, cert_file=credentials.cert_file, key_file=credentials.key_file).start()
    fcm_server = ServerThread(
        fcm, cert_file=credentials.cert_file, key_file=credentials.key_file, port=fcm_port
    ).start()
    try:
        yield PushServers(
            apns=apns, fcm=fcm, apns_url=apns_server.url, fcm_url=fcm_url, credentials=credentials
        )
    finally:
        apns_server.stop()
        fcm_server.stop()


@pytest.fixture
def live_push(push_servers: PushServers, settings: Any) -> Iterator[PushServers]:
    """The real APNs and FCM providers, talking to the fakes."""
    push_servers.reset()
    settings.PUSH = push_servers.settings()
    try:
        yield push_servers
    finally:
        reset_backend()


@pytest.fixture
def outbox(settings: Any) -> Iterator[list[Any]]:
    """The locmem backend's outbox, emptied."""
    settings.PUSH = {"BACKEND": LOCMEM_BACKEND}
    locmem.outbox.clear()
    try:
        yield locmem.outbox
    finally:
        locmem.outbox.clear()
        reset_backend()


def apns_token() -> str:
    return secrets.token_hex(32)


def fcm_token() -> str:
    return f"{secrets.token_urlsafe(16)}:APA91b{secrets.token_urlsafe(105)}"


def device(user: Any, platform: str = "ios", **fields: Any) -> Device:
    token = fields.pop("token", None) or (apns_token() if platform == "ios" else fcm_token())
    registered, _ = services.device_register(user=user, platform=platform, token=token, **fields)
    return registered


def run_push(**kwargs: Any) -> list[dict[str, Any]]:
    """Run the due jobs of the push queue in this process (tests.support.factories.run_due)."""
    return run_due(queues=("push",), **kwargs)


def delivery(pk: Any) -> PushDelivery:
    return PushDelivery.objects.get(pk=pk)


def job(record: PushDelivery) -> Job:
    return Job.objects.get(id=record.job_id)
