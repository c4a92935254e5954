"""Progress that a running handler reports: ``context.set_progress(done, total, message)``.

A task with ``takes_context=True`` gets a ``JobContext``. Each call checks the record and
keeps it as the attempt's latest; the executor's feeder writes the latest one to the job
row at most every ``WRITE_INTERVAL`` seconds per job, with its other writes and fenced like
them (running, same claim token, same attempt), and the attempt's last record goes with its
outcome. So a handler may call it per row: a call costs a check and a dict update.

The row's ``progress`` is ``{"done", "total", "message", "updated_at"}`` (``updated_at``
by the database's clock when written); readers add ``percent`` (``view``).

A handler sees an operator's cancel by asking: ``context.cancel_requested()`` or
``raise_if_cancelled()`` from a blocking handler, ``await context.acancel_requested()`` or
``araise_if_cancelled()`` from a coroutine, which runs the same query as Django's async ORM
runs its own (``sync_to_async``, thread-sensitive: the connection the handler's own ORM
calls use, never the event loop's thread). Either asks the database at most once per
``CANCEL_CHECK_INTERVAL`` per attempt, so a loop may check on every turn.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections
from django.tasks import TaskContext

from .exceptions import JobCancelled

# Interim writes per job: at most one per this many seconds.
WRITE_INTERVAL = 0.25
# Longest message kept (characters); a longer one is cut, not refused.
MAX_MESSAGE_LENGTH = 500

# (job id, attempt) -> record: where a running attempt's records go (the feeder).
Sink = Callable[[tuple[uuid.UUID, int], dict[str, Any]], None]


def progress_record(done: object, total: object = None, message: object = "") -> dict[str, Any]:
    """The stored form of one progress report; TypeError or ValueError saying what is wrong."""
    if isinstance(done, bool) or not isinstance(done, int):
        raise TypeError(f"progress done must be an int, not {type(done).__name__}")
    if done < 0:
        raise ValueError(f"progress done must be >= 0, got {done}")
    if total is not None:
        if isinstance(total, bool) or not isinstance(total, int):
            raise TypeError(f"progress total must be an int or None, not {type(total).__name__}")
        if total < 0:
            raise ValueError(f"progress total must be >= 0, got {total}")
        if done > total:
            raise ValueError(f"progress done ({done}) is more than total ({total})")
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a str, not {type(message).__name__}")
    # jsonb cannot hold U+0000; a message is text for people.
    message = message.replace("\x00", "")[:MAX_MESSAGE_LENGTH]
    return {"done": done, "total": total, "message": message}


def percent(done: int, total: int | None) -> int | None:
    """Whole percent done (rounded down, so 100 means finished); None without a total."""
    if total is None:
        return None
    if total == 0:
        return 100
    return min(100, math.floor(done * 100 / total))


def view(progress: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored record as readers show it: done, total, percent, message, updated_at."""
    if not isinstance(progress, dict) or "done" not in progress:
        return None
    done, total = progress.get("done", 0), progress.get("total")
    return {
        "done": done,
        "total": total,
        "percent": percent(done, total),
        "message": progress.get("message", ""),
        "updated_at": progress.get("updated_at"),
    }


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# A running handler asks the database whether its job was cancelled at most this often.
CANCEL_CHECK_INTERVAL = 1.0


@dataclass(slots=True)
class Tracker:
    """One attempt's progress: its latest record, handed to ``sink`` as it changes; and
    whether its job was cancelled while it ran, as last asked."""

    key: tuple[uuid.UUID, int]
    sink: Sink | None = None
    latest: dict[str, Any] | None = None
    cancelled: bool = False
    checked_at: float = -math.inf

    def cancel_requested(self, database: str) -> bool:
        """Whether an operator cancelled this job; asks the database at most once per
        CANCEL_CHECK_INTERVAL (on the handler's own connection), else answers from the last."""
        if self.cancelled:
            return True
        if _in_event_loop() or not self._due():
            # (An async handler's loop must not block on the database: acancel_requested.)
            return False
        return self._ask(database)

    async def acancel_requested(self, database: str) -> bool:
        """cancel_requested for a coroutine: the query runs off the event loop, as Django's
        async ORM runs its queries."""
        if self.cancelled:
            return True
        if not self._due():
            return False
        return await sync_to_async(self._ask, thread_sensitive=True)(database)

    def _due(self) -> bool:
        """Whether the database is due to be asked again (and, if so, mark it asked now)."""
        now = time.monotonic()
        if now - self.checked_at < CANCEL_CHECK_INTERVAL:
            return False
        self.checked_at = now
        return True

    def _ask(self, database: str) -> bool:
        with connections[database].cursor() as cursor:
            cursor.execute(
                "SELECT state = 'cancelled' OR cancel_requested_at IS NOT NULL FROM jobs_job WHERE id = %s",
                [self.key[0]],
            )
            row = cursor.fetchone()
        self.cancelled = bool(row and row[0])
        return self.cancelled

    def set(self, done: object, total: object = None, message: object = "") -> None:
        record = progress_record(done, total, message)
        self.latest = record
        if self.sink is not None:
            self.sink(self.key, record)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext(TaskContext):  # type: ignore[misc]  # frozen at run time, not in the stubs
    """Django's TaskContext with ``set_progress``."""

    progress: Tracker = field(repr=False)

    def set_progress(self, done: int, total: int | None = None, message: str = "") -> None:
        """Report ``done`` of ``total`` units (None: not known yet), with an optional
        message. Cheap: the row is written at most a few times a second. A check for
        cancellation too: raises JobCancelled once an operator cancelled the job."""
        self.progress.set(done, total, message)
        self.raise_if_cancelled()

    def cancel_requested(self) -> bool:
        """Whether an operator cancelled this job while it runs (the database is asked at
        most once a second). From a blocking handler; a coroutine awaits
        ``acancel_requested`` (here this answers from the last check only)."""
        return self.progress.cancel_requested(self._database())

    def raise_if_cancelled(self) -> None:
        """Stop here, with JobCancelled, if an operator cancelled this job: the handler's
        "next check". The attempt then ends the job 'cancelled'; this ends the work early."""
        if self.cancel_requested():
            raise self._cancelled()

    async def acancel_requested(self) -> bool:
        """``cancel_requested`` for an ``async def`` handler: the database is asked (at most
        once a second) without blocking the event loop."""
        return await self.progress.acancel_requested(self._database())

    async def araise_if_cancelled(self) -> None:
        """``raise_if_cancelled`` for an ``async def`` handler."""
        if await self.acancel_requested():
            raise self._cancelled()

    def _cancelled(self) -> JobCancelled:
        return JobCancelled(f"job {self.task_result.id} was cancelled while it ran")

    def _database(self) -> str:
        from django.tasks import task_backends

        return str(getattr(task_backends[self.task_result.backend], "database", DEFAULT_DB_ALIAS))
