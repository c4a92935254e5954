"""What an executor has to write about its attempts, and the writing of it: outcomes of
finished attempts, start marks of running ones, and their progress reports, all in one
fenced statement per batch (store.record_outcomes) on the feeder's connection.

* outcomes wait until the oldest has waited ``FLUSH_AFTER``, until ``FLUSH_COUNT`` are
  waiting, or until the lanes go idle;
* a running attempt's start is written with the next write once it is ``MARK_AFTER`` old
  (quicker ones are usually finished by then, and their outcome says they ran), or before
  it begins when a lane asks (``urgent``: a job handed back before, or a retry);
* a running attempt's latest progress report goes with the next write once
  ``WRITE_INTERVAL`` has passed since that job's last one; its last report goes with its
  outcome instead.

The statement returns the state each recorded job ended in: the attempts that did not
succeed are counted and logged by it then (joblog.py), so that one whose job an operator
cancelled while it ran counts as 'cancelled', not as the retry or failure it came to.

A batch the database refuses for what one outcome holds is written again one by one, and
an outcome that cannot be written at all as a dead job (outcome.unstorable), so that one
bad result never takes the executor down with every job in hand.

The state is guarded by the feeder's lock: methods whose name ends in ``_locked`` are
called with it held; ``write`` is called without it (it runs statements).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Collection, Iterable, Sequence
from functools import partial
from typing import Any

import psycopg

from .. import store
from ..db import Connection, is_connection_lost
from ..progress import WRITE_INTERVAL
from ..store import Claimed
from .joblog import JobLog
from .lane_rows import LaneRows
from .metrics import Publisher
from .outcome import Outcome, unstorable

logger = logging.getLogger("jobs.worker")

# Outcomes and start marks wait at most about this long in memory before they are written.
FLUSH_AFTER = 0.01
# Or until this many outcomes are waiting.
FLUSH_COUNT = 500
# A running attempt whose start is older than this is marked with the next write.
MARK_AFTER = 0.002

Key = tuple[uuid.UUID, int]


class Outbox:
    def __init__(
        self,
        cv: threading.Condition,
        *,
        db: Connection,
        token: uuid.UUID,
        lease_seconds: float,
        publisher: Publisher | None = None,
        log: JobLog | None = None,
    ) -> None:
        self.cv = cv
        self.db = db
        self.token = token
        self.lease_seconds = lease_seconds
        # The executor's metrics, published after each write of outcomes (None: off).
        self.publisher = publisher
        # The executor's per-attempt lines and counts: those held until their outcome is
        # written are finished after each write (None: nothing is held).
        self.log = log
        self.pending: list[Outcome] = []
        self.pending_since = 0.0
        # Being written right now (kept for the orphan release on reconnect).
        self.writing: list[Outcome] = []
        # (id, attempt) of running attempts whose start is written.
        self.marked: set[Key] = set()
        # (id, attempt) -> latest progress report not written yet, and when each running
        # attempt's progress was last written (monotonic).
        self.progress: dict[Key, dict[str, Any]] = {}
        self.progress_written: dict[Key, float] = {}
        # Sync flushes: lanes wait until written >= the generation they asked for.
        self.asked = 0
        self.written = 0

    # --- filled by the lanes (lock held) -------------------------------------------------

    def add_locked(self, row: Claimed, outcome: Outcome) -> int:
        """Queue a finished attempt's outcome; returns how many wait now."""
        if self.marked:
            self.marked.discard((row.id, row.attempt))
        if self.progress or self.progress_written:
            # Its last report goes with the outcome.
            self.progress.pop((row.id, row.attempt), None)
            self.progress_written.pop((row.id, row.attempt), None)
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending.append(outcome)
        return len(self.pending)

    def report_locked(self, key: Key, record: dict[str, Any], now: float) -> bool:
        """Keep a running attempt's latest progress; True if it is due to be written."""
        self.progress[key] = record
        return now >= self.progress_written.get(key, 0.0) + WRITE_INTERVAL

    # --- what is due (lock held) ---------------------------------------------------------

    def due_locked(
        self, lanes: Collection[LaneRows], now: float, *, stopping: bool
    ) -> tuple[list[Outcome], list[Key], list[dict[str, Any]]]:
        """The outcomes, start marks and progress reports to write now (taken out of the
        box: ``write`` puts them back if it fails)."""
        idle = not any(lane.running or lane.queued for lane in lanes)
        urgent = self.asked > self.written
        due = self.pending and (
            urgent
            or idle
            or stopping
            or len(self.pending) >= FLUSH_COUNT
            or now - self.pending_since >= FLUSH_AFTER
        )
        started = []
        for lane in lanes:
            for row, at in lane.running.values():
                key = (row.id, row.attempt)
                if key not in self.marked and (urgent or now - at >= MARK_AFTER):
                    started.append(key)
        progressed = self._due_progress_locked(now) if self.progress else []
        marks_due = started and (urgent or _oldest_unmarked(lanes, self.marked, now) >= FLUSH_AFTER)
        if not due and not progressed and not marks_due:
            return [], [], []
        outcomes, self.pending = (self.pending, []) if due or self.pending else ([], [])
        self.writing = outcomes
        self.marked.update(started)
        return outcomes, started, progressed

    def _due_progress_locked(self, now: float) -> list[dict[str, Any]]:
        due = []
        for key, record in list(self.progress.items()):
            if now >= self.progress_written.get(key, 0.0) + WRITE_INTERVAL:
                del self.progress[key]
                self.progress_written[key] = now
                due.append({"id": key[0], "attempt": key[1], "progress": record})
        return due

    def deadlines_locked(self) -> list[float]:
        """When waiting outcomes and progress reports fall due (monotonic)."""
        deadlines = []
        if self.pending:
            deadlines.append(self.pending_since + FLUSH_AFTER)
        if self.progress:
            deadlines.append(
                min(self.progress_written.get(key, 0.0) for key in self.progress) + WRITE_INTERVAL
            )
        return deadlines

    def take_all_locked(self) -> list[Outcome]:
        outcomes, self.pending = self.pending, []
        self.writing = outcomes
        return outcomes

    def job_ids_locked(self) -> list[str]:
        """The jobs whose outcome is not written yet."""
        return [str(o["id"]) for o in (*self.writing, *self.pending)]

    # --- writing (no lock held) ----------------------------------------------------------

    def write(
        self,
        outcomes: list[Outcome],
        started: list[Key],
        progressed: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Write a batch; on a lost connection, put it back for the next try and raise."""
        try:
            ended = self.record(outcomes, started, progressed)
        except BaseException:
            with self.cv:
                self.pending[:0] = outcomes
                self.marked.difference_update(started)
                for item in progressed:
                    # Unless a newer report came meanwhile.
                    self.progress.setdefault((item["id"], item["attempt"]), item["progress"])
                self.writing = []
            raise
        with self.cv:
            self.writing = []
        if len(ended) != len(outcomes):
            for outcome in outcomes:
                if _as_uuid(outcome["id"]) not in ended:
                    logger.warning(
                        "event=outcome_dropped job=%s attempt=%s reason=claim_superseded",
                        outcome["id"],
                        outcome["attempt"],
                    )
        if self.log is not None and outcomes:
            self.log.recorded(outcomes, ended)
        if self.publisher is not None and outcomes:
            self.publisher.publish()

    def record(
        self,
        outcomes: list[Outcome],
        started: list[Key],
        progressed: Sequence[dict[str, Any]] = (),
    ) -> dict[uuid.UUID, str]:
        """Run the batch's statement; the ids whose outcome was recorded, with the state
        each job ended in."""

        def write(
            cursor: Any,
            batch: list[Outcome],
            marks: list[Key],
            progress: Sequence[dict[str, Any]] = (),
        ) -> dict[uuid.UUID, str]:
            return store.record_outcomes(
                cursor,
                worker=self.token,
                outcomes=batch,
                started=marks,
                progress=progress,
                lease_seconds=self.lease_seconds,
                prepare=True,
            )

        try:
            return self.db.run(partial(write, batch=outcomes, marks=started, progress=progressed))
        except psycopg.Error as exc:
            if is_connection_lost(exc):
                raise
            failure = exc
        # The database refused the batch for what one outcome holds. Retried as is, it
        # would fail forever and take the executor down with every job in hand: write
        # them one by one, and an outcome that cannot be written at all as a dead job.
        logger.warning("event=outcome_batch_refused count=%d error=%r", len(outcomes), str(failure).strip())
        ended: dict[uuid.UUID, str] = {}
        self.db.run(partial(write, batch=[], marks=started, progress=progressed))
        for outcome in outcomes:
            try:
                ended |= self.db.run(partial(write, batch=[outcome], marks=[]))
            except psycopg.Error as exc:
                if is_connection_lost(exc):
                    raise
                ended |= self.db.run(partial(write, batch=[unstorable(outcome, exc)], marks=[]))
        return ended


def _oldest_unmarked(lanes: Iterable[LaneRows], marked: set[Key], now: float) -> float:
    oldest = 0.0
    for lane in lanes:
        for row, at in lane.running.values():
            if (row.id, row.attempt) not in marked:
                oldest = max(oldest, now - at)
    return oldest


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)
