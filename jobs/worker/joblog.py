"""The line and the metrics of each finished attempt.

One line per finished attempt: succeeded, snoozed or waiting at INFO, retried at WARNING,
dead at ERROR. Its level is JOBS_JOB_LOG_LEVEL (settings.LOGGING): WARNING by default, so
failures show and successes do not (a line per job costs about half of a no-op job's
throughput); INFO shows every job (the default with DEBUG=true).

An attempt is counted and logged by the state its job ended in. A success always ends the
job 'succeeded'; any other outcome ends it 'cancelled' if an operator asked to cancel it
while it ran, which only the outcome's write finds out (sql/record_outcomes.sql returns
each row's state). So in the worker (``defer_failures``) the line of an attempt that did not
succeed waits for its outcome's write (``recorded``, called by the outbox after each
batch); a success, nearly every job, is counted and logged at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from ..exceptions import TimeLimitExceeded
from ..observe import trace_id_of
from ..store import Claimed
from .metrics import OUTCOMES, Tally
from .outcome import Outcome

job_logger = logging.getLogger("jobs.job")
_LEVELS = {"dead": logging.ERROR, "retry": logging.WARNING}


@dataclass(slots=True)
class _Line:
    """A finished attempt's line, held until its outcome is written."""

    row: Claimed
    duration: float
    outcome: str
    error: BaseException | None
    reason: str


class JobLog:
    def __init__(self, tally: Tally | None = None, *, defer_failures: bool = False) -> None:
        # The executor's metrics (jobs/worker/metrics.py), None when they are off.
        self.tally = tally
        # Per-job lines carry their facts as fields too (LOG_FORMAT=json).
        self.json_logs = getattr(settings, "LOG_FORMAT", "text") == "json"
        self.jobs_done = 0
        # (job id, attempt) -> the line of an attempt that did not succeed, until its
        # outcome is written (``recorded``); None: every line at once. Filled by the lanes'
        # threads, emptied by the feeder's: single dict operations, atomic.
        self.deferred: dict[tuple[uuid.UUID, int], _Line] | None = {} if defer_failures else None

    def finished(
        self, row: Claimed, started: float, outcome: str, error: BaseException | None = None, reason: str = ""
    ) -> None:
        """Count the attempt (``outcome``: a key of metrics.OUTCOMES) and log its line; one
        that did not succeed waits for its outcome's write if lines are deferred."""
        self.jobs_done += 1
        duration = time.monotonic() - started
        if self.deferred is not None and outcome != "succeeded":
            self.deferred[(row.id, row.attempt)] = _Line(row, duration, outcome, error, reason)
            return
        self._write(row, duration, outcome, error, reason)

    def recorded(self, outcomes: Sequence[Outcome], ended: Mapping[uuid.UUID, str]) -> None:
        """Count and log the held lines of ``outcomes``, just written: by the state each job
        ended in (``ended``, from store.record_outcomes), 'cancelled' included. An outcome
        the fence dropped (its lease lapsed) keeps what the attempt came to."""
        if not self.deferred:
            return
        for outcome in outcomes:
            job_id = outcome["id"] if isinstance(outcome["id"], uuid.UUID) else uuid.UUID(outcome["id"])
            line = self.deferred.pop((job_id, outcome["attempt"]), None)
            if line is None:
                continue
            if ended.get(job_id) == "cancelled":
                self._write(line.row, line.duration, "cancelled", line.error, "cancel requested while it ran")
            else:
                self._write(line.row, line.duration, line.outcome, line.error, line.reason)

    def _write(
        self, row: Claimed, duration: float, outcome: str, error: BaseException | None, reason: str
    ) -> None:
        if self.tally is not None:
            # A hard limit that cancelled a coroutine counts as one that killed a process
            # (unless the job ended cancelled: the operator's request is why it stopped).
            killed = outcome != "cancelled" and isinstance(error, TimeLimitExceeded)
            label = "time_limit" if killed else OUTCOMES[outcome]
            self.tally.attempt(row.task_path, row.queue_name, label, duration, row.waited)
        level = _LEVELS.get(outcome, logging.INFO)
        if not job_logger.isEnabledFor(level):
            return
        trace_id = trace_id_of(row.trace_id)
        line = (
            f"job={row.id} task={row.task_path} queue={row.queue_name} "
            f"attempt={row.attempt}/{row.max_attempts} duration_ms={duration * 1000:.1f} "
            f"outcome={outcome} trace_id={trace_id}"
        )
        if error is not None:
            line += f" error={type(error).__name__}: {short(error)!r}"
        if reason:
            line += f" reason={reason!r}"
        if not self.json_logs:
            _emit(level, line)
            return
        # The same facts as fields, for LOG_FORMAT=json (jobs/logs.py).
        fields = {
            "event": "job_finished",
            "job_id": str(row.id),
            "task": row.task_path,
            "queue": row.queue_name,
            "attempt": row.attempt,
            "max_attempts": row.max_attempts,
            "trace_id": trace_id,
            "duration_ms": round(duration * 1000, 3),
            "outcome": outcome,
        }
        if error is not None:
            fields["error_type"] = type(error).__name__
        _emit(level, line, fields)


def _emit(level: int, line: str, fields: dict[str, Any] | None = None) -> None:
    """Log the per-job line. Its caller is known (JobLog.finished): logging's walk up the
    stack to find it, a fifth of the line's cost, is skipped."""
    record = job_logger.makeRecord(job_logger.name, level, __file__, 0, line, (), None, "finished", fields)
    job_logger.handle(record)


def short(error: BaseException) -> str:
    """The error's message for a log line, at most 200 characters; never raises."""
    try:
        return str(error)[:200]
    except BaseException:  # noqa: BLE001 - a log line must not fail on a bad __str__
        return f"<{type(error).__name__}>"
