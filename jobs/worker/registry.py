"""The worker registry: one row per live ``runworker`` process (the console shows it).

The housekeeper registers the worker, refreshes the row with every heartbeat (the claim
tokens of its executors and the jobs they run), and deletes it on a clean exit; rows of
workers that stopped without deregistering are expired by any worker's reaper.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime
from typing import Any

from ..conf import WORKER_EXPIRE_AFTER_SECONDS as EXPIRE_AFTER_SECONDS
from ..conf import jobs_settings
from .config import WorkerConfig


def register(cursor: Any, worker_id: uuid.UUID, config: WorkerConfig) -> None:
    cursor.execute(
        """
        INSERT INTO jobs_worker (id, hostname, pid, queues, concurrency, started_at,
                                 last_heartbeat_at, jobs_in_hand, slot_tokens)
        VALUES (%s, %s, %s, %s, %s, now(), now(), 0, '{}')
        ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = now()
        """,
        [
            worker_id,
            jobs_settings().HOSTNAME or socket.gethostname(),
            os.getppid(),
            ",".join(f"{name}:{weight}" for name, weight in config.queues),
            config.concurrency,
        ],
    )


def heartbeat(
    cursor: Any, worker_id: uuid.UUID, config: WorkerConfig, *, tokens: list[uuid.UUID], jobs_in_hand: int
) -> None:
    cursor.execute(
        """
        UPDATE jobs_worker
        SET last_heartbeat_at = now(), jobs_in_hand = %s, slot_tokens = %s::uuid[]
        WHERE id = %s
        """,
        [jobs_in_hand, tokens, worker_id],
    )
    if cursor.rowcount == 0:
        # Expired while the database was unreachable: come back.
        register(cursor, worker_id, config)


def unregister(cursor: Any, worker_id: uuid.UUID) -> None:
    cursor.execute("DELETE FROM jobs_worker WHERE id = %s", [worker_id])


def expire(cursor: Any, *, now: datetime | None = None) -> int:
    """Delete the rows of workers that stopped beating without unregistering."""
    cursor.execute(
        "DELETE FROM jobs_worker WHERE last_heartbeat_at < coalesce(%s, now()) - %s * interval '1 second'",
        [now, EXPIRE_AFTER_SECONDS],
    )
    return cursor.rowcount
