"""The housekeeper: a ``runworker``'s one process that talks to the database on behalf of
the whole worker, so that the supervisor never does (its time limits and child watching
must go on while the database hangs: a server or pooler that takes a statement and never
answers blocks only this process, which the supervisor restarts when it stops making
progress).

What it does, each on the database's clock:

* **listens** (one LISTEN connection per worker, always drained, never behind a handler)
  and wakes the executors through their wake pipes;
* **heartbeats**: extends the lease of exactly the jobs the executors run (their slot
  entries), every third of the shortest lease in hand (a claimed job's lease is short
  until it starts: store.UNSTARTED_LEASE); rows another transaction has locked are
  skipped and retried within ``RETRY_LOCKED``, so one lock never stops the others'
  extensions; keeps the worker's registry row fresh; tells the supervisor when the next
  extension is late (half an interval after it was due), so that a session that froze in
  a statement is replaced well within the lease;
* **reaps** leases that ran out, as soon as the earliest one does (plus a grace and a
  little jitter), so a dead worker's job is runnable again within about its lease, however
  long that is;
* **promotes** scheduled jobs as they come due (state ``scheduled`` to ``queued``) and
  wakes the workers of their queues;
* **folds** the console's aggregates together (jobs.stats.compact) every few seconds;
* **tends the limits' keys** now and then, by key (store.tend_limit_keys): a key with a
  slot free and jobs parked on it but none on their way wakes them (a safety net: a
  release wakes the next job itself), and keys no job names any more lose their rows;
* **settles** what a dead executor left (sent by the supervisor): the attempts it was
  running fail with the reason, its unstarted jobs go back unused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import select
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from .. import stats, store
from ..db import Connection, is_conflict, is_connection_lost, listen_libpq
from ..options import JobOptions
from ..payloads import error_record
from ..retry import decide
from ..store import workflows as workflow_store
from . import registry
from .attempt import policy_from_row
from .config import WorkerConfig
from .executor import die_with_parent, name_process
from .metrics import MetricsTable, Publisher, WorkerCollector, serve
from .outcome import Outcome
from .slots import SlotTable

logger = logging.getLogger("jobs.worker")

# libpq gives up within about two seconds on a peer that does not answer at all.
FAIL_FAST_LIBPQ = {
    "connect_timeout": 2,
    "tcp_user_timeout": 2000,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 2,
}
# The registry row and the leases are refreshed at least this often.
MAX_HEARTBEAT_INTERVAL = 10.0
# A lease extension is late this many heartbeat intervals after the last one: the
# supervisor then holds the claims and restarts the housekeeper, with half a lease left
# for its successor to connect and extend.
BEAT_LATE_AFTER = 1.5
# A heartbeat that skipped locked rows tries them again this soon.
RETRY_LOCKED = 0.1
# The earliest lease and due time are read at least this often (a job claimed with a
# shorter lease, or enqueued for sooner, than the ones known).
MAX_DUE_CHECK = 1.0
# Reaping waits for the grace (store.REAP_GRACE) plus up to this much jitter, so that the
# workers of a large fleet do not all reap the same moment.
REAP_JITTER = 0.25
# The console's aggregates (jobs.stats) are folded together about this often.
COMPACT_INTERVAL = 10.0
# The limits' keys are looked over about this often (seconds).
LIMIT_KEYS_INTERVAL = 30.0
# After a failed statement, the same work is tried again after this long.
RETRY_AFTER = 1.0
# The loop looks at the slot table at least this often.
TICK = 0.1


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


@dataclass
class Housekeeper:
    config: WorkerConfig
    worker_id: uuid.UUID
    slots: SlotTable
    # Write ends of the executors' wake pipes.
    wake_fds: list[int]
    # Commands from the supervisor (settlements, "stop"), and acknowledgements back.
    commands_r: int
    acks_w: int
    # The supervisor's shared progress word: we bump it every turn of the loop.
    progress: Any = None
    # The worker's metrics (metrics.py; None: off) and the supervisor's words they read.
    metrics: MetricsTable | None = None
    executors_alive: Any = None
    last_beat_word: Any = None
    # When the next lease extension is late (monotonic), for the supervisor.
    beat_late_word: Any = None
    settlements: list[Settlement] = field(default_factory=list)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.db = Connection(self.config.database, name="jobs-housekeeper", libpq=FAIL_FAST_LIBPQ)
        self.listener: Connection | None = None
        if self.config.listen:
            self.listener = Connection(
                self.config.database,
                name="jobs-listener",
                on_connect=_listen,
                libpq={**FAIL_FAST_LIBPQ, **listen_libpq()},
            )
        self.buffer = b""
        now = time.monotonic()
        self.next_heartbeat = now
        self.last_beat = -float("inf")
        self.next_due_check = now
        self.next_reap = float("inf")
        self.next_promote = float("inf")
        self.next_timeouts = float("inf")
        self.retry_locked_at = float("inf")
        self.next_compact = now + random.uniform(0, COMPACT_INTERVAL)
        self.next_limit_keys = now + random.uniform(0, LIMIT_KEYS_INTERVAL)
        self.unextended: set[uuid.UUID] = set()
        self.listen_retry_at = 0.0
        self.registered = False
        # Its own counts (what it settles and reaps) in the table's last region.
        self.publisher = (
            Publisher(self.metrics, self.metrics.regions - 1) if self.metrics is not None else None
        )

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        die_with_parent(os.getppid())
        name_process("jobs-housekeep")
        if self.metrics is not None and self.config.metrics_port:
            collector = WorkerCollector(
                self.metrics, self.slots, executors_alive=self.executors_alive, last_beat=self.last_beat_word
            )
            serve(collector, port=self.config.metrics_port, addr=self.config.metrics_addr)
        self._db(lambda cursor: registry.register(cursor, self.worker_id, self.config), "register")
        while True:
            self._tick()
            self._read_commands()
            self._settle()
            if self.stopping and not self.settlements:
                break
            now = time.monotonic()
            self._schedule_heartbeat()
            if now >= self.next_heartbeat or now >= self.retry_locked_at:
                self._heartbeat(now)
            if now >= self.next_due_check:
                self._check_due(now)
            if now >= self.next_reap:
                self._reap(now)
            if now >= self.next_promote:
                self._promote(now)
            if now >= self.next_timeouts:
                self._expire_signal_waits(now)
            if now >= self.next_compact:
                self._compact(now)
            if now >= self.next_limit_keys:
                self._tend_limit_keys(now)
            self._wait()
        self._db(lambda cursor: registry.unregister(cursor, self.worker_id), "unregister")
        self.db.drop()
        if self.listener is not None:
            self.listener.drop()
        return 0

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress.value = time.monotonic()

    def _wait(self) -> None:
        now = time.monotonic()
        deadline = min(
            self.next_heartbeat,
            self.next_due_check,
            self.next_reap,
            self.next_promote,
            self.retry_locked_at,
            self.next_timeouts,
            self.next_compact,
            self.next_limit_keys,
        )
        timeout = min(max(deadline - now, 0.0), 1.0)
        fds = [self.commands_r]
        sock = self._listener_socket()
        if sock is not None:
            fds.append(sock)
        readable, _, _ = select.select(fds, [], [], timeout)
        if sock is not None and sock in readable:
            self._drain_notifications()

    # --- listening ---------------------------------------------------------------------------

    def _listener_socket(self) -> int | None:
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

    def _drain_notifications(self) -> None:
        assert self.listener is not None and self.listener.conn is not None
        pgconn = self.listener.conn.pgconn
        woken = 0
        try:
            pgconn.consume_input()
            while pgconn.notifies() is not None:
                woken += 1
        except psycopg.Error as exc:
            self.listener.lost(exc)
        if woken:
            self.wake_executors()

    def wake_executors(self) -> None:
        # Every executor of this worker serves the same queues; a claim that finds nothing
        # is cheap. A full pipe already holds a wake-up.
        for fd in self.wake_fds:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(fd, b"\0")

    # --- heartbeat ---------------------------------------------------------------------------

    def _in_hand(self) -> tuple[list[tuple[uuid.UUID, uuid.UUID]], float, list[uuid.UUID]]:
        """(job id, token) of every running slot entry, the shortest lease among them (a
        job just started may still be under its short claim lease, store.UNSTARTED_LEASE,
        until its start mark lands), and the tokens of the live executors."""
        held: list[tuple[uuid.UUID, uuid.UUID]] = []
        tokens: list[uuid.UUID] = []
        shortest = self.config.lease_seconds
        for index in range(self.slots.executors):
            named = self.slots.executor(index)
            if named is None:
                continue
            token, _ = named
            tokens.append(token)
            for _, running in self.slots.running(index):
                held.append((running.job_id, token))
                shortest = min(shortest, running.lease_seconds, store.UNSTARTED_LEASE)
        return held, shortest, tokens

    def _schedule_heartbeat(self) -> None:
        """Beat every third of the shortest lease in hand (looked at every tick, so a job
        with a short lease that starts right after a beat gets its extension in time)."""
        _, shortest, _ = self._in_hand()
        interval = min(MAX_HEARTBEAT_INTERVAL, shortest / 3)
        self.next_heartbeat = min(self.next_heartbeat, self.last_beat + interval)
        if self.beat_late_word is not None and self.last_beat > -float("inf"):
            # A job with a shorter lease started: its extensions are due sooner.
            late_at = self.last_beat + BEAT_LATE_AFTER * interval
            if late_at < self.beat_late_word.value:
                self.beat_late_word.value = late_at

    def _heartbeat(self, now: float) -> None:
        held, shortest, tokens = self._in_hand()
        interval = min(MAX_HEARTBEAT_INTERVAL, shortest / 3)
        retry_only = now < self.next_heartbeat
        if retry_only:
            held = [pair for pair in held if pair[0] in self.unextended]

        def beat(cursor: Any) -> store.Beat:
            done = store.extend_leases(cursor, held=held, lease_seconds=self.config.lease_seconds)
            if not retry_only:
                registry.heartbeat(cursor, self.worker_id, self.config, tokens=tokens, jobs_in_hand=len(held))
                registry.expire(cursor)
            return done

        done = self._db(beat, "heartbeat")
        if done is None:
            # The database is away: try again soon, not at the next full interval.
            self.next_heartbeat = now + min(interval, RETRY_AFTER)
            return
        if not retry_only:
            self.last_beat = now
            self.next_heartbeat = now + interval
            if self.last_beat_word is not None:
                self.last_beat_word.value = time.time()
            if self.beat_late_word is not None:
                self.beat_late_word.value = now + BEAT_LATE_AFTER * interval
        # Skipped while another transaction had them locked: try those again soon. A job no
        # longer held (cancelled, reaped, finished meanwhile) waits for the next full beat,
        # which skips it too once its handler is gone from the slot table.
        self.unextended = done.locked
        self.retry_locked_at = now + RETRY_LOCKED if self.unextended else float("inf")

    # --- reaper and promoter -----------------------------------------------------------------

    def _check_due(self, now: float) -> None:
        self.next_due_check = now + min(MAX_DUE_CHECK, self.config.poll_interval, self.config.reaper_interval)
        due = self._db(store.next_due, "due")
        if due is None:
            return
        self.next_reap = self._when(
            now, due.now, due.lease_expires, store.REAP_GRACE + random.uniform(0, REAP_JITTER)
        )
        self.next_promote = self._when(now, due.now, due.scheduled, 0.0)
        self.next_timeouts = self._when(now, due.now, due.signal_timeout, 0.0)

    @staticmethod
    def _when(now: float, db_now: datetime, at: datetime | None, extra: float) -> float:
        """The monotonic time at which the database's clock reads ``at`` + ``extra``."""
        if at is None:
            return float("inf")
        return now + max((at - db_now).total_seconds() + extra, 0.0)

    def _reap(self, now: float) -> None:
        self.next_reap = float("inf")

        def reap(cursor: Any) -> list[store.Reaped]:
            reaped = store.reap(
                cursor, backoff_base=self.config.backoff_base, backoff_cap=self.config.backoff_cap
            )
            registry.expire(cursor)
            return reaped

        reaped = self._db(reap, "reap")
        if reaped is None:
            self.next_reap = now + RETRY_AFTER
            return
        for row in reaped:
            if self.publisher is not None and not row.unstarted:
                self.publisher.tally.count(row.task_path, row.queue_name, "lease_lost")
            logger.warning(
                "event=reaped job=%s task=%s attempt=%d outcome=%s reason=%s",
                row.id,
                row.task_path,
                row.attempt,
                "released" if row.unstarted else ("dead" if row.state == "dead" else "retry"),
                "'worker lost before the job started'" if row.unstarted else "'worker lost'",
            )
        if reaped and self.publisher is not None:
            self.publisher.publish()
        if reaped:
            # More may have expired meanwhile; and given-back jobs are due now.
            self.next_due_check = now
            if any(row.unstarted for row in reaped):
                self.wake_executors()

    def _promote(self, now: float) -> None:
        self.next_promote = float("inf")
        promoted = self._db(store.promote, "promote")
        if promoted is None:
            self.next_promote = now + RETRY_AFTER
            return
        if promoted:
            logger.debug("event=promoted %s", " ".join(f"{q}={n}" for q, n in promoted.items()))
            self.wake_executors()
            self.next_due_check = now

    def _expire_signal_waits(self, now: float) -> None:
        """Workflows' signal waits whose timeout passed fail (and their workflows with them)."""
        self.next_timeouts = float("inf")
        expired = self._db(workflow_store.expire_signals, "signal_timeouts")
        if expired is None:
            self.next_timeouts = now + RETRY_AFTER
            return
        if expired:
            logger.info("event=signal_waits_timed_out count=%d", expired)
            # Compensations may have become due.
            self.wake_executors()
            self.next_due_check = now

    # --- settlements ---------------------------------------------------------------------------

    def _compact(self, now: float) -> None:
        # Jittered, so that the workers of a fleet take turns rather than all at once.
        self.next_compact = now + COMPACT_INTERVAL * random.uniform(0.75, 1.25)
        self._db(stats.compact, "compact")

    def _tend_limit_keys(self, now: float) -> None:
        self.next_limit_keys = now + LIMIT_KEYS_INTERVAL * random.uniform(0.75, 1.25)
        tended = self._db(store.tend_limit_keys, "limit_keys")
        if tended is None:
            return
        if tended.woken:
            # Each was parked with a slot free and no wake-up on its way: a lost wake-up.
            logger.info("event=limit_waits_woken count=%d", tended.woken)
        if tended.dropped:
            logger.debug("event=limit_keys_dropped count=%d", tended.dropped)

    def _read_commands(self) -> None:
        readable, _, _ = select.select([self.commands_r], [], [], 0)
        if not readable:
            return
        chunk = os.read(self.commands_r, 65536)
        if not chunk:
            # The supervisor is gone (killed): so is the worker. Its row and its jobs are
            # left to expire, as for any worker that vanished.
            os._exit(1)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line == b"stop":
                self.stopping = True
            elif line:
                self.settlements.append(Settlement.parse(line))

    def _settle(self) -> None:
        while self.settlements:
            settlement = self.settlements[0]
            counted = self._db(lambda cursor, s=settlement: self._write_settlement(cursor, s), "settle")
            if counted is None:
                return
            if self.publisher is not None:
                for task, queue, outcome in counted:
                    self.publisher.tally.count(task, queue, outcome)
                self.publisher.publish()
            self.settlements.pop(0)
            with contextlib.suppress(OSError):
                os.write(self.acks_w, f"{settlement.seq}\n".encode())

    def _write_settlement(self, cursor: Any, settlement: Settlement) -> list[tuple[str, str, str]]:
        """Write what a dead executor left; the (task, queue, outcome) of each attempt it
        cost, for the metrics."""
        # Every write is fenced on the token, so repeating one after a lost reply is safe;
        # the failed attempts go first, or the token-wide settling below would take them.
        counted = []
        for job_id, attempt, error in settlement.failed:
            if settlement.refund_running:
                store.release(cursor, worker=settlement.token, ids=[job_id], started_too=True)
                continue
            labels = self._fail_attempt(cursor, settlement.token, job_id, attempt, error)
            if labels is not None:
                counted.append(labels)
        for row in store.reap_token(
            cursor,
            token=settlement.token,
            reason=settlement.reason,
            backoff_base=self.config.backoff_base,
            backoff_cap=self.config.backoff_cap,
        ):
            if not row.unstarted:
                counted.append((row.task_path, row.queue_name, "process_died"))
            logger.warning(
                "event=settled job=%s task=%s attempt=%d outcome=%s",
                row.id,
                row.task_path,
                row.attempt,
                "released" if row.unstarted else row.state,
            )
        return counted

    def _fail_attempt(
        self, cursor: Any, token: uuid.UUID, job_id: uuid.UUID, attempt: int, error: dict[str, Any]
    ) -> tuple[str, str, str] | None:
        cursor.execute(
            "SELECT task_path, max_attempts, backoff_base, backoff_cap, jitter, non_retryable, queue_name "
            "FROM jobs_job WHERE id = %s",
            [job_id],
        )
        row = cursor.fetchone()
        if row is None:
            return None
        task_path, max_attempts, base, cap, jitter, non_retryable, queue_name = row
        try:
            options = JobOptions(
                max_attempts=max_attempts, backoff_base=base, backoff_cap=cap, jitter=jitter,
                non_retryable=tuple(non_retryable or ()),
            )  # fmt: skip
            policy = policy_from_row(self.config, task_path=task_path, options=options)
        except Exception:  # noqa: BLE001 - a bad option on the row: the worker's defaults
            policy = policy_from_row(
                self.config, task_path=task_path, options=JobOptions(max_attempts=max_attempts)
            )
        decision = decide(_Failure(error["message"]), attempt=attempt, policy=policy)
        outcome: Outcome = {
            "id": str(job_id),
            "attempt": attempt,
            "state": decision.state,
            "delay": decision.delay,
            "error": error,
        }
        changed = store.record_outcomes(cursor, worker=token, outcomes=[outcome])
        logger.warning(
            "event=attempt_failed job=%s task=%s attempt=%d/%d outcome=%s error=%r recorded=%s",
            job_id,
            task_path,
            attempt,
            max_attempts,
            "retry" if decision.state == "queued" else "dead",
            error["message"],
            bool(changed),
        )
        if not changed:
            return None
        killed = error.get("exception", "").endswith(".TimeLimitExceeded")
        return task_path, queue_name, "time_limit" if killed else "process_died"

    # --- the connection ----------------------------------------------------------------------

    def _db(self, operation: Any, what: str) -> Any:
        """Run a statement; None if the database is away or refused it (logged)."""
        try:
            return self.db.run(operation, retry=False)
        except psycopg.Error as exc:
            if is_conflict(exc, self.db.conn):
                # Logged by the connection (event=db_conflict); the next round runs it again.
                return None
            if is_connection_lost(exc):
                logger.warning("event=db_unavailable op=%s error=%r", what, str(exc).strip())
            else:
                logger.warning("event=db_error op=%s error=%r", what, str(exc).strip())
            return None


def beat_late_after(lease_seconds: float) -> float:
    """Seconds a new housekeeper has for its first lease extension: as long as a running
    one has between two, and at least a second to fork and connect."""
    return max(1.0, BEAT_LATE_AFTER * min(MAX_HEARTBEAT_INTERVAL, lease_seconds / 3))


class _Failure(Exception):
    """Stands for the error a dead executor's attempt ended with (ProcessDied,
    TimeLimitExceeded): retried per the job's policy, never non-retryable."""


def _listen(conn: psycopg.Connection) -> None:
    conn.execute(f"LISTEN {store.NOTIFY_CHANNEL}")


def failed_attempt(
    job_id: uuid.UUID, attempt: int, error: BaseException
) -> tuple[uuid.UUID, int, dict[str, Any]]:
    """A settlement's entry for an attempt that ended with ``error``."""
    return (job_id, attempt, error_record(error))
