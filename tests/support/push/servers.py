"""Local TLS servers for the push tests: a test CA (trustme), the keys the providers sign
with, and an ASGI app served by hypercorn (HTTP/2 over TLS) in a background thread."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypercorn.asyncio import serve
from hypercorn.config import Config

APNS_KEY_ID = "ABC123DEFG"
APNS_TEAM_ID = "TEAM123456"
APNS_TOPIC = "com.example.app"
FCM_PROJECT = "example-project"
FCM_CLIENT_EMAIL = "push@example-project.iam.gserviceaccount.com"


@dataclass(frozen=True)
class Credentials:
    """Files as a deployment would have them, and the public halves the fakes verify with."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    apns_key_file: Path
    apns_public_key: Any
    fcm_credentials_file: Path
    fcm_public_key: Any


def make_credentials(directory: Path, *, token_uri: str) -> Credentials:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    server.private_key_pem.write_to_path(str(key_file))

    # The team's APNs signing key: P-256, PKCS#8 PEM, as Apple's AuthKey_<id>.p8.
    apns_key = ec.generate_private_key(ec.SECP256R1())
    apns_key_file = directory / f"AuthKey_{APNS_KEY_ID}.p8"
    apns_key_file.write_bytes(
        apns_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    # A Firebase service-account key file, its token_uri pointing at the fake.
    fcm_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    fcm_file = directory / "service-account.json"
    fcm_file.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": FCM_PROJECT,
                "private_key_id": "k1",
                "private_key": fcm_key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ).decode(),
                "client_email": FCM_CLIENT_EMAIL,
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return Credentials(
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        apns_key_file=apns_key_file,
        apns_public_key=apns_key.public_key(),
        fcm_credentials_file=fcm_file,
        fcm_public_key=fcm_key.public_key(),
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """Serves ``app`` on https://127.0.0.1:<port> until ``stop()``."""

    def __init__(self, app: Any, *, cert_file: Path, key_file: Path, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.config = Config()
        self.config.bind = [f"127.0.0.1:{self.port}"]
        self.config.certfile = str(cert_file)
        self.config.keyfile = str(key_file)
        self.config.alpn_protocols = ["h2", "http/1.1"]
        # Idle connections stay open, as Apple's do for hours: a test counts connections.
        self.config.keep_alive_timeout = 3600
        self.config.h2_max_concurrent_streams = 1000
        self.config.accesslog = None
        self.config.errorlog = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=f"fake-server-{self.port}", daemon=True)
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._stop = asyncio.Event()
        self.loop.run_until_complete(serve(self.app, self.config, shutdown_trigger=self._stop.wait))

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)


async def lifespan(receive: Any, send: Any) -> None:
    """Answer hypercorn's lifespan messages: nothing to start or stop."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


def request_headers(scope: dict[str, Any]) -> dict[str, str]:
    return {k.decode().lower(): v.decode() for k, v in scope["headers"]}


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def respond(send: Any, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
    encoded = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    if body:
        encoded.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})


def client_ssl_context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))
