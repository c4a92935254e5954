"""What a dead executor left, and how the housekeeper writes it down.

The supervisor sees an executor die and sends a Settlement (the attempts it was running,
why it died) down a pipe; the housekeeper writes it: each attempt fails per its job's
retry policy (or goes back unused, after a shutdown timeout), and the rest of the
executor's jobs go back to their queues. Every write is fenced on the executor's token.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from .. import store
from ..exceptions import ProcessDied, TimeLimitExceeded
from ..options import OPTION_COLUMNS, JobOptions
from ..payloads import error_record
from ..retry import decide
from .attempt import policy_from_row
from .config import WorkerConfig
from .outcome import Outcome
from .slots import Running

logger = logging.getLogger("jobs.worker")


@dataclass
class Settlement:
    """What a dead executor left, as the supervisor saw it."""

    seq: int
    token: uuid.UUID
    # (job id, attempt, error record) of the attempts it was running.
    failed: list[tuple[uuid.UUID, int, dict[str, Any]]]
    reason: str
    # Its running attempts go back unused (killed at the end of a shutdown timeout).
    refund_running: bool = False

    def message(self) -> bytes:
        return (
            json.dumps(
                {
                    "seq": self.seq,
                    "token": str(self.token),
                    "failed": [[str(job), attempt, error] for job, attempt, error in self.failed],
                    "reason": self.reason,
                    "refund_running": self.refund_running,
                }
            ).encode()
            + b"\n"
        )

    @classmethod
    def parse(cls, line: bytes) -> Settlement:
        data = json.loads(line)
        return cls(
            seq=data["seq"],
            token=uuid.UUID(data["token"]),
            failed=[(uuid.UUID(job), attempt, error) for job, attempt, error in data["failed"]],
            reason=data["reason"],
            refund_running=data["refund_running"],
        )


def write_settlement(cursor: Any, config: WorkerConfig, settlement: Settlement) -> list[tuple[str, str, str]]:
    """Write what a dead executor left; the (task, queue, outcome) of each attempt it
    cost, for the metrics."""
    # Every write is fenced on the token, so repeating one after a lost reply is safe;
    # the failed attempts go first, or the token-wide settling below would take them.
    counted = []
    for job_id, attempt, error in settlement.failed:
        if settlement.refund_running:
            store.release(cursor, worker=settlement.token, ids=[job_id], started_too=True)
            continue
        labels = fail_attempt(cursor, config, settlement.token, job_id, attempt, error)
        if labels is not None:
            counted.append(labels)
    for row in store.reap_token(
        cursor,
        token=settlement.token,
        reason=settlement.reason,
        backoff_base=config.backoff_base,
        backoff_cap=config.backoff_cap,
    ):
        if not row.unstarted:
            counted.append((row.task_path, row.queue_name, reaped_as(row, "process_died")))
        logger.warning(
            "event=settled job=%s task=%s attempt=%d outcome=%s",
            row.id,
            row.task_path,
            row.attempt,
            "released" if row.unstarted else row.state,
        )
    return counted


def reaped_as(row: store.Reaped, lost: str) -> str:
    """What a started attempt that a reaper took back is counted and logged as: 'cancelled'
    if its cancel was requested while it ran (its job ends so: sql/reap.sql), else ``lost``."""
    return "cancelled" if row.state == "cancelled" else lost


def fail_attempt(
    cursor: Any,
    config: WorkerConfig,
    token: uuid.UUID,
    job_id: uuid.UUID,
    attempt: int,
    error: dict[str, Any],
) -> tuple[str, str, str] | None:
    cursor.execute(_READ_JOB, [job_id])
    row = cursor.fetchone()
    if row is None:
        return None
    task_path, queue_name, *columns = row
    options = JobOptions.from_columns(columns)
    max_attempts = options.max_attempts
    try:
        policy = policy_from_row(config, task_path=task_path, options=options)
    except Exception:  # noqa: BLE001 - a bad option on the row: the worker's defaults
        policy = policy_from_row(config, task_path=task_path, options=JobOptions(max_attempts=max_attempts))
    decision = decide(_Failure(error["message"]), attempt=attempt, policy=policy)
    outcome: Outcome = {
        "id": str(job_id),
        "attempt": attempt,
        "state": decision.state,
        "delay": decision.delay,
        "error": error,
    }
    ended = store.record_outcomes(cursor, worker=token, outcomes=[outcome]).get(job_id)
    cancelled = ended == "cancelled"
    logger.warning(
        "event=attempt_failed job=%s task=%s attempt=%d/%d outcome=%s error=%r recorded=%s",
        job_id,
        task_path,
        attempt,
        max_attempts,
        "cancelled" if cancelled else ("retry" if decision.state == "queued" else "dead"),
        error["message"],
        ended is not None,
    )
    if ended is None:
        return None
    if cancelled:
        # An operator asked to cancel it while it ran: that is how it ended.
        return task_path, queue_name, "cancelled"
    killed = error.get("exception", "").endswith(".TimeLimitExceeded")
    return task_path, queue_name, "time_limit" if killed else "process_died"


# A job's task, queue and options (jobs.options.OPTION_COLUMNS).
_READ_JOB = f"SELECT task_path, queue_name, {', '.join(OPTION_COLUMNS)} FROM jobs_job WHERE id = %s"


class _Failure(Exception):
    """Stands for the error a dead executor's attempt ended with (ProcessDied,
    TimeLimitExceeded): retried per the job's policy, never non-retryable."""


def failed_attempt(
    job_id: uuid.UUID, attempt: int, error: BaseException
) -> tuple[uuid.UUID, int, dict[str, Any]]:
    """A settlement's entry for an attempt that ended with ``error``."""
    return (job_id, attempt, error_record(error))


def lost_executor_failures(
    killed_for: tuple[uuid.UUID, int, float] | None, running: list[Running], how: str
) -> list[tuple[uuid.UUID, int, dict[str, Any]]]:
    """The failed attempts of an executor that died (``how``) while running ``running``:
    killed for overrunning ``killed_for`` (job id, attempt, limit), that attempt failed
    with TimeLimitExceeded and the others it ran with ProcessDied."""
    failed = []
    if killed_for is not None:
        job_id, attempt, limit = killed_for
        failed.append(
            failed_attempt(
                job_id,
                attempt,
                TimeLimitExceeded(f"hard time limit of {limit:g}s exceeded; executor process killed"),
            )
        )
        for other in running:
            if (other.job_id, other.attempt) != (job_id, attempt):
                failed.append(
                    failed_attempt(
                        other.job_id,
                        other.attempt,
                        ProcessDied(f"executor process killed: job {job_id} exceeded its hard time limit"),
                    )
                )
    else:
        for other in running:
            failed.append(
                failed_attempt(
                    other.job_id,
                    other.attempt,
                    ProcessDied(f"executor process died while running the job ({how})"),
                )
            )
    return failed
