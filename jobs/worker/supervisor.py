"""The ``runworker`` process: supervises executor processes and does the housekeeping.

Process model: the supervisor forks ``--concurrency`` executors. Each claims, runs and
records its own jobs on its own connection, so the hot path has no inter-process hop.
The supervisor:

* kills an executor whose handler overruns its hard time limit (a ``while True: pass`` or
  a blocking C call cannot be interrupted from inside) and records the timeout;
* notices an executor that died (``os._exit``, a signal, the OOM killer), records that
  attempt as failed, gives its unstarted jobs back, and starts a new executor;
* extends the leases of every job its executors hold (heartbeat), keeps the worker
  registry row fresh, and runs the reaper with jitter;
* turns SIGTERM/SIGINT into a graceful shutdown, and a second signal into an exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import signal
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from django.db import connections

from .. import store
from ..backend import JobTask, resolve_task
from ..exceptions import JobsError, ProcessDied, TimeLimitExceeded
from ..payloads import error_record
from ..retry import RetryPolicy, decide
from . import registry
from .config import WorkerConfig
from .db import CONNECTION_ERRORS, Connection
from .executor import EXIT_OK, EXIT_RECYCLE, Executor
from .slots import Running, SlotTable

logger = logging.getLogger("jobs.worker")

TICK = 0.05
HANDLED_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
# The housekeeping connection gives up within about two seconds on a database that does
# not answer at all (a partition, a dead host): libpq's shortest connect timeout, and
# unacknowledged writes or a silent peer end the connection. Refused connections and
# errors fail at once. Meanwhile executors are neither watched nor timed out.
FAIL_FAST_LIBPQ = {
    "connect_timeout": 2,
    "tcp_user_timeout": 2000,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 2,
}
# The registry row and the leases are refreshed at least this often.
MAX_HEARTBEAT_INTERVAL = 10.0
# How long an exiting supervisor keeps trying to settle its lost executors' jobs; after
# that their leases run out and the reaper takes them back.
SETTLE_AT_EXIT = 5.0


@dataclass
class Child:
    index: int
    pid: int
    token: uuid.UUID
    # Set when the supervisor killed it for overrunning: (job id, attempt, limit).
    killed_for: tuple[uuid.UUID, int, float] | None = None
    # Set when the shutdown timeout ran out: its jobs go back without using an attempt.
    killed_at_shutdown: bool = False


@dataclass
class Supervisor:
    config: WorkerConfig
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    children: dict[int, Child] = field(default_factory=dict)
    signals_received: int = 0
    shutdown_deadline: float | None = None
    unsettled: list[Settlement] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.slots = SlotTable(self.config.concurrency)
        self.db = Connection(
            self.config.database, name="jobs-supervisor", on_connect=_fail_fast, libpq=FAIL_FAST_LIBPQ
        )
        self.last_heartbeat = -float("inf")
        self.next_reap = time.monotonic() + random.uniform(0, min(5.0, self.config.reaper_interval))

    # --- lifecycle ----------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self._db(lambda c: registry.register(c, self), "register")
        logger.info(
            "event=worker_started worker=%s pid=%d queues=%s concurrency=%d burst=%s",
            self.id,
            os.getpid(),
            ",".join(f"{n}:{w}" for n, w in self.config.queues),
            self.config.concurrency,
            self.config.burst,
        )
        for index in range(self.config.concurrency):
            self._spawn(index)
        while self.children:
            self._collect_children()
            if self.unsettled:
                self._settle()
            now = time.monotonic()
            self._enforce_time_limits(now)
            if self.shutdown_deadline is not None and now >= self.shutdown_deadline:
                self._kill_all("shutdown timeout")
                self.shutdown_deadline = float("inf")
            if now >= self.last_heartbeat + self._heartbeat_interval():
                self._heartbeat(now)
            if now >= self.next_reap and self.shutdown_deadline is None:
                self._reap(now)
            readable, _, _ = select.select([wake_r], [], [], TICK)
            if readable:
                os.read(wake_r, 4096)
        self._finish_settling()
        self._db(lambda c: registry.unregister(c, self), "unregister")
        self.db.drop()
        logger.info("event=worker_stopped worker=%s", self.id)
        return 0

    def _finish_settling(self) -> None:
        deadline = time.monotonic() + SETTLE_AT_EXIT
        while not self._settle() and time.monotonic() < deadline:
            time.sleep(TICK)
        if self.unsettled:
            logger.error(
                "event=unsettled_at_exit executors=%d reason='database unavailable'", len(self.unsettled)
            )

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals_received += 1
        if self.signals_received == 1:
            logger.info(
                "event=shutdown_requested signal=%s timeout=%.1fs",
                signal.Signals(signum).name,
                self.config.shutdown_timeout,
            )
            self.shutdown_deadline = time.monotonic() + self.config.shutdown_timeout
            for child in self.children.values():
                _signal(child.pid, signal.SIGTERM)
        else:
            # A second signal: leave now; the leases bring the jobs in hand back.
            logger.warning("event=shutdown_forced signal=%s", signal.Signals(signum).name)
            for child in self.children.values():
                _signal(child.pid, signal.SIGKILL)
            os._exit(1)

    def _spawn(self, index: int) -> None:
        token = uuid.uuid4()
        # The executor must not inherit open Django connections (sockets are shared
        # across fork); the supervisor's own psycopg connection it never touches, and it
        # leaves through os._exit so nothing is closed on the supervisor's behalf.
        connections.close_all()
        supervisor_pid = os.getpid()
        self.slots.clear(index)
        # Until the child has its own handlers, a signal must not run the supervisor's
        # (it would signal the child's siblings); the parent must not miss one either.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                for signum in HANDLED_SIGNALS:
                    signal.signal(signum, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                code = Executor(
                    self.config, index=index, token=token, slots=self.slots, supervisor_pid=supervisor_pid
                ).run()
            except BaseException:
                logger.exception("event=executor_crashed index=%d", index)
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = Child(index=index, pid=pid, token=token)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if self.shutdown_deadline is not None:
            # Forked as the shutdown began: it stops at once, having claimed nothing.
            _signal(pid, signal.SIGTERM)

    # --- executors ----------------------------------------------------------------

    def _collect_children(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            running = self.slots.read(child.index)
            self.slots.clear(child.index)
            if code in (EXIT_OK, EXIT_RECYCLE) and child.killed_for is None:
                # Burst executors leave when the queue is empty; recycled ones are replaced.
                if self.shutdown_deadline is None and (code == EXIT_RECYCLE or not self.config.burst):
                    self._spawn(child.index)
                continue
            self._lost_executor(child, code, running)
            if self.shutdown_deadline is None:
                self._spawn(child.index)

    def _lost_executor(self, child: Child, code: int, running: Running | None) -> None:
        """An executor died or was killed: settle the job it was running, give the rest
        of its jobs back to the queue without using their attempts."""
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        failed: tuple[uuid.UUID, int, JobsError] | None = None
        if child.killed_for is not None:
            job_id, attempt, limit = child.killed_for
            message = f"hard time limit of {limit:g}s exceeded; executor process killed"
            failed = (job_id, attempt, TimeLimitExceeded(message))
        elif running is not None and not child.killed_at_shutdown:
            message = f"executor process died while running the job ({how})"
            failed = (running.job_id, running.attempt, ProcessDied(message))
        logger.warning("event=executor_lost index=%d pid=%d how=%r", child.index, child.pid, how)
        self.unsettled.append(Settlement(child.token, failed))
        self._settle()

    def _settle(self) -> bool:
        """Write what lost executors leave behind; with the database away, keep it for the
        next tick rather than wait (the leases are no longer extended meanwhile)."""
        while self.unsettled:
            settlement = self.unsettled[0]
            if not self._db(settlement.write, "settle"):
                return False
            self.unsettled.pop(0)
        return True

    def _enforce_time_limits(self, now: float) -> None:
        for child in self.children.values():
            if child.killed_for is not None:
                continue
            running = self.slots.read(child.index)
            if running is not None and running.deadline and now > running.deadline:
                child.killed_for = (running.job_id, running.attempt, running.deadline - running.started)
                logger.warning(
                    "event=time_limit job=%s attempt=%d pid=%d", running.job_id, running.attempt, child.pid
                )
                _signal(child.pid, signal.SIGKILL)

    def _kill_all(self, reason: str) -> None:
        for child in self.children.values():
            logger.warning("event=executor_killed pid=%d reason=%r", child.pid, reason)
            child.killed_at_shutdown = True
            _signal(child.pid, signal.SIGKILL)

    # --- housekeeping -------------------------------------------------------------

    def _heartbeat_interval(self) -> float:
        """A third of the shortest lease in hand, looked at every tick: a job with a short
        lease that starts right after a beat gets its first extension in time."""
        leases = [self.config.lease_seconds]
        for child in self.children.values():
            running = self.slots.read(child.index)
            if running is not None:
                leases.append(running.lease_seconds)
        return min(MAX_HEARTBEAT_INTERVAL, min(leases) / 3)

    def _heartbeat(self, now: float) -> None:
        tokens = [child.token for child in self.children.values()]

        def beat(cursor: Any) -> bool:
            in_hand = store.extend_leases(cursor, tokens=tokens, lease_seconds=self.config.lease_seconds)
            registry.heartbeat(cursor, self, tokens=tokens, jobs_in_hand=in_hand)
            return True

        if self._db(beat, "heartbeat"):
            self.last_heartbeat = now

    def _reap(self, now: float) -> None:
        interval = self.config.reaper_interval
        self.next_reap = now + interval * random.uniform(0.5, 1.5)

        def reap(cursor: Any) -> None:
            for job_id, state, task_path, attempt in store.reap(
                cursor, backoff_base=self.config.backoff_base, backoff_cap=self.config.backoff_cap
            ):
                logger.warning(
                    "event=reaped job=%s task=%s attempt=%d outcome=%s reason='worker lost'",
                    job_id,
                    task_path,
                    attempt,
                    "dead" if state == "dead" else "retry",
                )
            registry.expire(cursor)

        self._db(reap, "reap")

    def _db(self, operation: Any, what: str) -> Any:
        """Run a housekeeping statement; on a lost connection log and go on, so that
        supervising executors never waits for the database. The next tick retries."""
        if (
            self.db.cursor is None
            and self.db.failures
            and time.monotonic() < getattr(self, "_db_retry_at", 0)
        ):
            return None
        try:
            return self.db.run(operation, retry=False)
        except CONNECTION_ERRORS as exc:
            delay = min(5.0, 0.1 * 2 ** min(self.db.failures, 6))
            self._db_retry_at = time.monotonic() + delay
            logger.warning(
                "event=db_unavailable op=%s retry_in=%.1fs error=%r", what, delay, str(exc).strip()
            )
            return None
        except psycopg.Error as exc:
            # Not the connection but the statement (a timeout, a conflict): try again at
            # the next tick rather than take the worker down.
            logger.warning("event=db_error op=%s error=%r", what, str(exc).strip())
            return None


def _fail_fast(conn: psycopg.Connection) -> None:
    """Housekeeping must not hold up supervising: a statement that waits for a lock or
    runs long gives up, and the next tick tries again (see FAIL_FAST_LIBPQ)."""
    conn.execute("SET statement_timeout = '2s'")
    conn.execute("SET lock_timeout = '500ms'")


@dataclass(frozen=True)
class Settlement:
    """What a lost executor leaves: maybe a failed attempt, and jobs to give back."""

    token: uuid.UUID
    failed: tuple[uuid.UUID, int, JobsError] | None

    def write(self, cursor: Any) -> bool:
        # Both writes are fenced on the token, so repeating them after a lost reply is safe;
        # the failed attempt goes first, or the release would give it back unused.
        if self.failed is not None:
            self._fail_attempt(cursor, *self.failed)
        released = store.release(cursor, worker=self.token)
        if released:
            logger.warning("event=released count=%d reason=executor_lost", len(released))
        return True

    def _fail_attempt(self, cursor: Any, job_id: uuid.UUID, attempt: int, error: JobsError) -> None:
        cursor.execute("SELECT task_path, max_attempts FROM jobs_job WHERE id = %s", [job_id])
        row = cursor.fetchone()
        if row is None:
            return
        policy = replace(_policy_for(row[0]), max_attempts=row[1])
        decision = decide(error, attempt=attempt, policy=policy)
        outcome = {
            "id": str(job_id),
            "attempt": attempt,
            "state": decision.state,
            "delay": decision.delay,
            "error": error_record(error),
        }
        changed = store.record_outcomes(cursor, worker=self.token, outcomes=[outcome])
        logger.warning(
            "event=attempt_failed job=%s task=%s attempt=%d/%d outcome=%s error=%r recorded=%s",
            job_id,
            row[0],
            attempt,
            row[1],
            "retry" if decision.state == "queued" else "dead",
            str(error),
            bool(changed),
        )


def _policy_for(task_path: str) -> RetryPolicy:
    from .executor import _default_policy

    try:
        task = resolve_task(task_path)
    except JobsError:
        return _default_policy()
    return task.retry_policy() if isinstance(task, JobTask) else _default_policy()


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
