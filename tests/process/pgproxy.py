"""A TCP proxy in front of the test PostgreSQL, for what only a network can do to a worker:
stop forwarding (a server or pooler that takes a statement and never answers), and show
which statements each client sent (read from the frontend protocol's Query and Parse
messages, keyed by the connection's application_name).

Clients must not use TLS through it (``sslmode=disable``), or there is nothing to read.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import defaultdict


class PgProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.forwarding = threading.Event()
        self.forwarding.set()
        self.closed = False
        self.lock = threading.Lock()
        # application_name -> the SQL texts its connections sent.
        self.statements: dict[str, list[str]] = defaultdict(list)
        self.sockets: list[socket.socket] = []
        # Per connection: its application_name (a one-item list, filled in by the startup
        # message) and whether it may forward.
        self.connections: list[tuple[list[str], threading.Event]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        """Stop forwarding in both directions: statements go out and nothing comes back."""
        self.forwarding.clear()

    def thaw(self) -> None:
        self.forwarding.set()
        with self.lock:
            for _, flowing in self.connections:
                flowing.set()

    def freeze_sessions(self, prefix: str) -> int:
        """Stop forwarding on the connections open now whose application_name starts with
        ``prefix`` (a session that hangs, as behind a NAT that lost it); connections made
        later go through. How many were frozen."""
        with self.lock:
            frozen = [flowing for name, flowing in self.connections if name[0].startswith(prefix)]
        for flowing in frozen:
            flowing.clear()
        return len(frozen)

    def close(self) -> None:
        self.closed = True
        self.forwarding.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def sent_by(self, prefix: str) -> list[str]:
        """Every statement sent by connections whose application_name starts with ``prefix``."""
        with self.lock:
            return [sql for name, sqls in self.statements.items() if name.startswith(prefix) for sql in sqls]

    # --- plumbing ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            name: list[str] = [""]
            flowing = threading.Event()
            flowing.set()
            with self.lock:
                self.connections.append((name, flowing))
            threading.Thread(
                target=self._from_client, args=(client, server, name, flowing), daemon=True
            ).start()
            threading.Thread(target=self._pump, args=(server, client, flowing), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, flowing: threading.Event) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._wait_to_forward(flowing)
                target.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

    def _from_client(
        self, client: socket.socket, server: socket.socket, name: list[str], flowing: threading.Event
    ) -> None:
        buffer = b""
        started = False
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                buffer += data
                buffer, started = self._read_messages(buffer, started, name)
                self._wait_to_forward(flowing)
                server.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_WR)

    def _wait_to_forward(self, flowing: threading.Event) -> None:
        while not (self.forwarding.wait(0.1) and flowing.wait(0.1)):
            if self.closed:
                return
        time.sleep(0)

    def _read_messages(self, buffer: bytes, started: bool, name: list[str]) -> tuple[bytes, bool]:
        while True:
            if not started:
                if len(buffer) < 8:
                    return buffer, started
                (length,) = struct.unpack("!I", buffer[:4])
                if len(buffer) < length:
                    return buffer, started
                body = buffer[8:length]
                code = struct.unpack("!I", buffer[4:8])[0]
                buffer = buffer[length:]
                if code in (80877103, 80877104):  # SSL / GSS request: the server says no
                    continue
                fields = body.split(b"\0")
                params = dict(zip(fields[0::2], fields[1::2], strict=False))
                name[0] = params.get(b"application_name", b"").decode()
                started = True
                continue
            if len(buffer) < 5:
                return buffer, started
            kind = buffer[:1]
            (length,) = struct.unpack("!I", buffer[1:5])
            if len(buffer) < 1 + length:
                return buffer, started
            body = buffer[5 : 1 + length]
            buffer = buffer[1 + length :]
            sql = None
            if kind == b"Q":
                sql = body.split(b"\0")[0]
            elif kind == b"P":
                sql = body.split(b"\0")[1]
            if sql is not None:
                with self.lock:
                    self.statements[name[0]].append(sql.decode(errors="replace"))
