"""The housekeeper's LISTEN relay, for executors whose connections cannot keep a LISTEN (a
pooler in transaction mode, with a direct JOBS_LISTEN_URL to listen on): one LISTEN
connection per worker, always drained, never behind a handler, that wakes the executors
through their wake pipes. Elsewhere each executor listens on its own connection
(feeder.py), one process hop closer to the job."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import psycopg

from .. import store
from ..db import Connection, listen_libpq
from .config import WorkerConfig


class NotifyRelay:
    def __init__(self, config: WorkerConfig, wake_fds: list[int], libpq: dict[str, Any]) -> None:
        self.config = config
        # Write ends of the executors' wake pipes.
        self.wake_fds = wake_fds
        self.listener: Connection | None = None
        if config.listen and not config.listen_in_executors:
            self.listener = Connection(
                config.database,
                name="jobs-listener",
                on_connect=store.listen,
                libpq={**libpq, **listen_libpq()},
            )
        self.listen_retry_at = 0.0

    def socket(self) -> int | None:
        """The LISTEN connection's socket; None (the executors poll) while it cannot connect.
        A lost notification only delays a job until the next poll (invariant 9)."""
        if self.listener is None or time.monotonic() < self.listen_retry_at:
            return None
        try:
            self.listener.ensure(wait=False)
        except psycopg.Error:
            self.listen_retry_at = time.monotonic() + min(self.config.poll_interval, 5.0)
            return None
        return self.listener.fileno()

    def drain(self) -> None:
        assert self.listener is not None
        if self.listener.read_notifies():
            self.wake_executors()

    def wake_executors(self) -> None:
        # Every executor of this worker serves the same queues; a claim that finds nothing
        # is cheap. A full pipe already holds a wake-up.
        for fd in self.wake_fds:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(fd, b"\0")

    def close(self) -> None:
        if self.listener is not None:
            self.listener.drop()
