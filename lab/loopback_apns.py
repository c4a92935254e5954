"""A no-op APNs on loopback for the push benchmark: HTTP/2 over TLS, 200 to every request.

It does nothing but speak the protocol (one h2 connection state machine per client, the
request's apns-id echoed), so a benchmark run measures our side: the job, the delivery
record writes, the JWT, httpx and TLS. Its certificate and the APNs signing key are made
on the spot; nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def write_credentials(directory: Path) -> tuple[Path, Path, Path]:
    """(certificate, its key, an APNs .p8 signing key): a self-signed certificate for
    127.0.0.1 that clients trust through PUSH_CA_BUNDLE."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "push loopback")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file, p8_file = directory / "cert.pem", directory / "key.pem", directory / "AuthKey.p8"
    pkcs8 = serialization.PrivateFormat.PKCS8
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption()))
    signing = ec.generate_private_key(ec.SECP256R1())
    p8_file.write_bytes(
        signing.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())
    )
    return cert_file, key_file, p8_file


class _H2Server(asyncio.Protocol):
    def __init__(self, server: LoopbackAPNs) -> None:
        self.server = server
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.ids: dict[int, str] = {}

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.server.connections += 1
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {bytes(k): bytes(v) for k, v in event.headers or ()}
                self.ids[event.stream_id or 0] = headers.get(b"apns-id", b"").decode()
            elif isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id or 0)
            elif isinstance(event, h2.events.StreamEnded):
                stream = event.stream_id or 0
                self.server.requests += 1
                self.conn.send_headers(
                    stream, [(":status", "200"), ("apns-id", self.ids.pop(stream, ""))], end_stream=True
                )
        self.transport.write(self.conn.data_to_send())


class LoopbackAPNs:
    """Serves on https://127.0.0.1:<port> in a background thread until ``stop()``."""

    def __init__(self, *, cert_file: Path, key_file: Path) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert_file, key_file)
        self.context.set_alpn_protocols(["h2"])
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"https://127.0.0.1:{self.port}"
        self.connections = 0
        self.requests = 0
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="loopback-apns", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            self.loop.create_server(lambda: _H2Server(self), "127.0.0.1", self.port, ssl=self.context)
        )
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()
            self.loop.run_until_complete(server.wait_closed())
            self.loop.close()

    def start(self) -> LoopbackAPNs:
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the loopback APNs did not start")
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
