"""Job rows for tests, with columns that agree with their state, and an in-process runner.

``job(state)`` builds a row as the engine itself would have left it in that state (a
running row has a lease, a claim token and one token per attempt; a dead row has one error
per attempt; ...), so a test starts from a state the engine can really reach. The bulk
helpers insert many rows in one ``INSERT ... SELECT generate_series``.

``run_due`` drives due jobs through the real claim statement, the worker's executor code
and the fenced outcome write, in this process and with a clock the test chooses.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, connection
from django.utils import timezone

from jobs import store
from jobs.conf import jobs_settings
from jobs.ids import id_bound
from jobs.models import Job
from jobs.states import State
from jobs.worker.attempt import Attempts
from jobs.worker.config import WorkerConfig
from jobs.worker.lanes import run_attempt

NOOP = "tests.tasks.basic.noop"
LEASE_SECONDS = 300.0


def error_entry(attempt: int, *, at: datetime, worker: uuid.UUID, message: str = "boom") -> dict[str, Any]:
    """One element of ``Job.errors`` as record_outcomes writes it."""
    return {
        "attempt": attempt,
        "at": at.isoformat(),
        "worker": str(worker),
        "exception": "builtins.RuntimeError",
        "message": message,
        "traceback": f"Traceback (most recent call last):\nRuntimeError: {message}\n",
    }


_made = itertools.count()


def made_at(moment: datetime) -> uuid.UUID:
    """A job id as the engine makes it at ``moment`` (time-ordered, jobs.ids), for rows
    placed in the past or the future; ids made for one moment keep the order they were
    made in."""
    n = next(_made)
    low = ((n >> 32) & 0xFFF) << 64 | 0b10 << 62 | (n & 0xFFFFFFFF) << 30 | random.getrandbits(30)
    return uuid.UUID(int=id_bound(moment).int | low)


def job(
    state: State = State.QUEUED,
    *,
    task_path: str = NOOP,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue_name: str = "default",
    priority: int = 0,
    attempt: int | None = None,
    max_attempts: int = 3,
    worker: uuid.UUID | None = None,
    now: datetime | None = None,
    run_at: datetime | None = None,
    lease_seconds: float = LEASE_SECONDS,
    started: bool = True,
    **extra: Any,
) -> Job:
    """A job row in ``state``, consistent with it; ``extra`` overrides any column. A running
    row has begun its attempt unless ``started=False`` (claimed in a batch, waiting its
    turn). A scheduled row is due in a minute unless ``run_at`` says otherwise. A row
    placed at ``now`` has an id made then."""
    placed = now is not None
    now = now or timezone.now()
    if attempt is None:
        attempt = {State.RUNNING: 1, State.SUCCEEDED: 1, State.DEAD: max_attempts}.get(state, 0)
    if attempt < 1 and state in (State.RUNNING, State.SUCCEEDED):
        raise ValueError(f"a {state} job has been claimed at least once: attempt >= 1")
    # Every attempt before the current one failed and left an error; a queued row with
    # attempts is waiting for a retry, and a dead row's last attempt failed too.
    failed = max(attempt - 1, 0) if state in (State.RUNNING, State.SUCCEEDED) else attempt
    tokens = [uuid.uuid4() for _ in range(attempt)]
    if state == State.RUNNING:
        worker = worker or tokens[-1]
        tokens[-1] = worker
    errors = [error_entry(n, at=now, worker=tokens[n - 1]) for n in range(1, failed + 1)]
    values: dict[str, Any] = {
        **({"id": made_at(now)} if placed else {}),
        "task_path": task_path,
        "queue_name": queue_name,
        "priority": priority,
        "state": state,
        "args": [] if args is None else args,
        "kwargs": {} if kwargs is None else kwargs,
        "run_at": run_at or (now + timedelta(minutes=1) if state == State.SCHEDULED else now),
        "attempt": attempt,
        "max_attempts": max_attempts,
        "lease_seconds": lease_seconds,
        "worker_ids": tokens,
        "created_at": now,
        "errors": errors,
        "last_error": errors[-1]["message"] if errors else "",
        "trace_id": uuid.uuid4().hex,
    }
    if attempt:
        # Every attempt so far began (a running row's too: its handler is running).
        values.update(
            started_at=now,
            last_attempted_at=now,
            started_attempt=attempt if started or state != State.RUNNING else attempt - 1,
        )
    if state == State.RUNNING:
        values.update(worker_id=worker, lease_expires_at=now + timedelta(seconds=lease_seconds))
    if state in (State.SUCCEEDED, State.DEAD, State.CANCELLED, State.EXPIRED):
        values["finished_at"] = now
    if state == State.SUCCEEDED:
        values["result"] = None
    if state == State.WAITING:
        # Only workflow steps wait: in a node (here one with no row, which advances nothing).
        values.update(workflow_node=uuid.uuid4(), workflow_position=0)
    values.update(extra)
    return Job.objects.create(**values)


def row(job_id: uuid.UUID | str) -> dict[str, Any]:
    """Every column of a job, to compare a row before and after an operation."""
    return Job.objects.filter(id=job_id).values().get()


def insert_finished(count: int, *, state: State = State.SUCCEEDED, task_path: str = NOOP) -> None:
    """``count`` finished rows in one statement, as a long-running system accumulates."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs,
                                  run_at, attempt, max_attempts, lease_seconds, worker_ids,
                                  started_at, last_attempted_at, finished_at, result)
            SELECT gen_random_uuid(), %(task_path)s, 'default', 0, %(state)s, '[]', '{}',
                   now() - n * interval '1 second', 1, 3, 300, ARRAY[gen_random_uuid()],
                   now() - n * interval '1 second', now() - n * interval '1 second',
                   now() - n * interval '1 second', 'null'
            FROM generate_series(1, %(count)s) AS n
            """,
            {"count": count, "state": state, "task_path": task_path},
        )


def insert_queued(count: int, *, task_path: str = NOOP, queue_name: str = "default") -> None:
    """``count`` due queued rows in one statement; ``args`` holds the row's number."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_job (id, task_path, queue_name, priority, args, kwargs, run_at,
                                  max_attempts, lease_seconds)
            SELECT gen_random_uuid(), %(task_path)s, %(queue)s, 0, jsonb_build_array(n), '{}',
                   now() - interval '1 second', 3, 300
            FROM generate_series(1, %(count)s) AS n
            """,
            {"count": count, "task_path": task_path, "queue": queue_name},
        )


def worker_config(*queues: str) -> WorkerConfig:
    return WorkerConfig.from_settings(
        jobs_settings(),
        queues=tuple((name, 1) for name in queues or ("default",)),
        strict=True,
        concurrency=1,
        burst=True,
    )


def run_due(
    *,
    now: datetime | None = None,
    queues: Sequence[str] = ("default",),
    limit: int = 100,
    token: uuid.UUID | None = None,
) -> list[dict[str, Any]]:
    """Promote what is due at ``now``, claim it, run each job with the worker's attempt
    code, record the outcomes at ``now``; return the outcomes. Runs on Django's connection,
    so it works inside a test's transaction too."""
    token = token or uuid.uuid4()
    attempts = Attempts(worker_config(*queues), token=token)
    # After each handler a worker closes Django's connection if it is obsolete, as a
    # long-lived worker must; inside a test's transaction that would throw the test's
    # transaction away, so there the connection is kept.
    with connection.cursor() as cursor:
        store.promote(cursor, now=now)
        rows = store.claim(cursor, worker=token, queues=list(queues), limit=limit, now=now)
    # Rows claimed after their deadline (expired) or kept waiting by a limit were settled by
    # the claim itself.
    outcomes = [run_attempt(attempts, row, time.monotonic()) for row in rows if row.decision == "start"]
    if not connection.in_atomic_block:
        close_old_connections()
    with connection.cursor() as cursor:
        store.record_outcomes(cursor, worker=token, outcomes=outcomes, now=now)
    return outcomes
