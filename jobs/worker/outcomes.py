"""Outcomes of finished attempts, written in batches and never held back for long.

A fast queue is recorded in one fenced statement per batch instead of one per job. The
cost is that an outcome waits in memory, and an executor killed meanwhile (a poison pill,
a time limit, a shutdown that ran out of time) loses it: the job then runs again. So a
background thread writes whatever has waited ``FLUSH_AFTER``, also while a slow handler
runs; the executor itself flushes at the end of each batch and before a job that has a
time limit or is a retry (either may take the process down).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from functools import partial
from typing import Any

import psycopg

from .. import store
from ..exceptions import BadReturnValue
from .db import CONNECTION_ERRORS, Connection

logger = logging.getLogger("jobs.worker")

# Outcomes wait at most about this long in memory before they are written.
FLUSH_AFTER = 0.01
# A flush that failed with something other than a lost connection is tried again after.
RETRY_AFTER = 1.0


class OutcomeBuffer:
    def __init__(self, db: Connection, *, token: uuid.UUID, db_lock: threading.Lock) -> None:
        self.db = db
        self.token = token
        # Serialises use of the executor's connection between this thread and the loop.
        self.db_lock = db_lock
        self.pending: list[dict[str, Any]] = []
        # Taken from pending, being written now.
        self.writing: list[dict[str, Any]] = []
        self.since = 0.0
        self.cond = threading.Condition()
        self.closed = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._flush_when_due, name="jobs-outcomes", daemon=True)
        self.thread.start()

    def add(self, outcome: dict[str, Any]) -> None:
        with self.cond:
            if not self.pending:
                self.since = time.monotonic()
                self.cond.notify()
            self.pending.append(outcome)

    def ids(self) -> list[str]:
        """The jobs whose outcome is not written yet."""
        with self.cond:
            return [outcome["id"] for outcome in (*self.writing, *self.pending)]

    def flush(self) -> None:
        with self.db_lock:
            with self.cond:
                outcomes, self.pending = self.pending, []
                self.writing = outcomes
            if not outcomes:
                return
            try:
                changed = self._write(outcomes)
            except BaseException:
                with self.cond:
                    self.pending[:0] = outcomes
                raise
            finally:
                with self.cond:
                    self.writing = []
        if len(changed) != len(outcomes):
            for outcome in outcomes:
                if uuid.UUID(str(outcome["id"])) not in changed:
                    logger.warning(
                        "event=outcome_dropped job=%s attempt=%s reason=claim_superseded",
                        outcome["id"],
                        outcome["attempt"],
                    )

    def _write(self, outcomes: list[dict[str, Any]]) -> set[uuid.UUID]:
        try:
            return self.db.run(partial(self._record, outcomes=outcomes))
        except psycopg.Error as exc:
            if isinstance(exc, CONNECTION_ERRORS):
                raise
            failure = exc
        # The database refused the batch for what one outcome holds. Retried as is, it
        # would fail forever and take the executor down with every job in hand: write
        # them one by one, and an outcome that cannot be written at all as a dead job.
        logger.warning("event=outcome_batch_refused count=%d error=%r", len(outcomes), str(failure).strip())
        changed: set[uuid.UUID] = set()
        for outcome in outcomes:
            try:
                changed |= self.db.run(partial(self._record, outcomes=[outcome]))
            except psycopg.Error as exc:
                if isinstance(exc, CONNECTION_ERRORS):
                    raise
                changed |= self.db.run(partial(self._record, outcomes=[_unstorable(outcome, exc)]))
        return changed

    def _record(self, cursor: Any, *, outcomes: list[dict[str, Any]]) -> set[uuid.UUID]:
        return store.record_outcomes(cursor, worker=self.token, outcomes=outcomes)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(timeout=5)

    def _flush_when_due(self) -> None:
        # Signals are for the main thread: the soft time limit must interrupt the handler
        # even while it sleeps in a C call.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
        while True:
            with self.cond:
                while not self.closed:
                    if self.pending:
                        due_in = self.since + FLUSH_AFTER - time.monotonic()
                        if due_in <= 0:
                            break
                        self.cond.wait(due_in)
                    else:
                        self.cond.wait()
                if self.closed:
                    return
            try:
                self.flush()
            except Exception:
                # The loop flushes again at the end of the batch and reports what fails.
                logger.exception("event=outcome_flush_failed")
                time.sleep(RETRY_AFTER)


def _unstorable(outcome: dict[str, Any], exc: Exception) -> dict[str, Any]:
    message = f"the outcome of this attempt cannot be stored: {str(exc).strip()}"
    return {
        "id": outcome["id"],
        "attempt": outcome["attempt"],
        "state": "dead",
        "error": {
            "exception": f"{BadReturnValue.__module__}.{BadReturnValue.__qualname__}",
            "message": message,
            "traceback": "",
        },
    }
