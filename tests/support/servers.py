"""Private servers the PgBouncer, replica and observability tiers start: a PgBouncer in
transaction mode in front of the test database, PostgreSQL clusters of their own (a primary
made with initdb, a streaming replica made from it with pg_basebackup -R), each on its own
port in a temporary folder, and an OTLP/HTTP receiver for traces. Nothing here touches the
machine's own cluster or its configuration.

PostgreSQL and PgBouncer refuse to run as root: as root they run as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg


def _postgres_bin() -> Path:
    """POSTGRES_BIN, else the newest Debian server binaries, else wherever initdb is on PATH."""
    if configured := os.environ.get("POSTGRES_BIN"):
        return Path(configured)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name),
        reverse=True,
    )
    if debian:
        return debian[0].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else Path("/usr/lib/postgresql/15/bin")


POSTGRES_BIN = _postgres_bin()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    return pwd.getpwnam("postgres") if os.geteuid() == 0 else None


def _as_server_user() -> dict[str, Any]:
    user = _server_user()
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _dies_with_its_parent() -> None:
    """In the child between fork and exec: SIGTERM when the test process dies, however it
    dies (a killed test run must not leave a server holding the test database)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, 15)


def private_dir(prefix: str) -> Path:
    """A temporary folder the server user owns (outside pytest's 0700 tmp folders)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if (user := _server_user()) is not None:
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


def wait_for_port(port: int, *, timeout: float = 15.0, what: str = "server", log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        if time.monotonic() > deadline:
            detail = log.read_text() if log and log.exists() else ""
            raise AssertionError(f"{what} on port {port} did not start\n{detail}")
        time.sleep(0.05)


class PgBouncer:
    """PgBouncer (Debian's package) in transaction mode in front of ``upstream``."""

    def __init__(self, upstream_host: str, upstream_port: int, *, pool_size: int = 4) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed: scripts/test installs Debian's package")
        self.dir = private_dir("jobs-pgbouncer-")
        self.port = free_port()
        self.log = self.dir / "pgbouncer.log"
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={upstream_host} port={upstream_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            # Few server connections for many clients, handed out in turn, so that one
            # client's statements really do land on other clients' sessions.
            f"default_pool_size = {pool_size}\n"
            "server_round_robin = 1\n"
            "max_client_conn = 500\n"
            "admin_users = postgres\n"
            f"logfile = {self.log}\n"
        )
        for name in ("userlist.txt", "pgbouncer.ini"):
            (self.dir / name).chmod(0o644)
        args = [binary, str(self.dir / "pgbouncer.ini")]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_dies_with_its_parent,
            **_as_server_user(),
        )
        wait_for_port(self.port, what="pgbouncer", log=self.log)

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command on PgBouncer's admin console (SHOW POOLS, SHOW SERVERS...), as rows of
        column name -> value (the columns differ between PgBouncer versions)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True, prepare_threshold=None) as conn:
            cursor = conn.cursor()
            cursor.execute(command)
            if not cursor.description:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """A PostgreSQL cluster of the tests' own: a data folder, a port, pg_ctl."""

    def __init__(self, datadir: Path, port: int) -> None:
        self.datadir = datadir
        self.port = port
        self.log = datadir.parent / f"{datadir.name}.log"

    @classmethod
    def primary(cls, base: Path) -> Cluster:
        """initdb a primary that streams WAL to replicas (trust on loopback only)."""
        cluster = cls(base / "primary", free_port())
        cluster._tool("initdb", "-D", str(cluster.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--locale=C.UTF-8", "--no-sync")  # fmt: skip
        with (cluster.datadir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {cluster.port}\n"
                "listen_addresses = '127.0.0.1'\n"
                "unix_socket_directories = ''\n"
                "wal_level = replica\n"
                "max_wal_senders = 5\n"
                "hot_standby = on\n"
                "fsync = off\n"
                "synchronous_commit = on\n"
                "shared_buffers = 32MB\n"
                "max_connections = 60\n"
            )
        with (cluster.datadir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        return cluster

    def replica(self, base: Path) -> Cluster:
        """A streaming replica of this (running) primary: pg_basebackup -R, its own port."""
        replica = Cluster(base / "replica", free_port())
        self._tool("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                   "-D", str(replica.datadir), "-R", "-X", "stream", "-c", "fast", "--no-sync")  # fmt: skip
        with (replica.datadir / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {replica.port}\n")
        return replica

    def _tool(self, tool: str, *args: str) -> str:
        result = subprocess.run(
            [str(POSTGRES_BIN / tool), *args],
            capture_output=True,
            text=True,
            cwd=self.datadir.parent,
            start_new_session=True,
            **_as_server_user(),
        )
        if result.returncode != 0:
            detail = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed:\n{result.stdout}{result.stderr}\n{detail}")
        return result.stdout

    def start(self) -> None:
        self._tool("pg_ctl", "-D", str(self.datadir), "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        if (self.datadir / "postmaster.pid").exists():
            self._tool("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def promote(self) -> None:
        self._tool("pg_ctl", "-D", str(self.datadir), "-w", "promote")

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []


class OtlpReceiver:
    """What an OpenTelemetry collector is to an exporter over OTLP/HTTP: ``POST /v1/traces``
    with a protobuf ExportTraceServiceRequest (gzipped or not), answered as a collector
    answers. Every span it is sent is kept, decoded, in ``spans``."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(404 if self.path != "/v1/traces" else 415)
                    return
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.spans.extend(_decoded_spans(request))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.spans)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _decoded_spans(request: Any) -> list[dict[str, Any]]:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    def values(attributes: Any) -> dict[str, Any]:
        return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in attributes}

    found = []
    for resource_spans in request.resource_spans:
        resource = values(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    {
                        "service": resource.get("service.name"),
                        "name": span.name,
                        "kind": Span.SpanKind.Name(span.kind),
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex(),
                        "links": [link.span_id.hex() for link in span.links],
                        "attributes": values(span.attributes),
                        "status": Status.StatusCode.Name(span.status.code),
                    }
                )
    return found
