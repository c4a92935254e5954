"""An executor process: claim jobs sized to what it can finish soon, run them, record the
outcomes in batches. One handler runs at a time per executor; the supervisor runs
``--concurrency`` executors and can kill one whose handler overruns its time limit.

Invariants kept here (ARCHITECTURE.md): one claim statement sized to the executor's
capacity (2), the attempt counted by the claim (3), every later write fenced on claim
token and attempt (4), no transaction open while a handler runs - the connection is in
autocommit (5).
"""

from __future__ import annotations

import inspect
import logging
import os
import select
import signal
import threading
import time
import uuid
from dataclasses import replace
from functools import partial
from typing import Any, cast

from django.db import close_old_connections, connections
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus

from .. import signals, store
from ..backend import JobTask, resolve_task
from ..conf import jobs_settings
from ..exceptions import JobsError, SoftTimeLimitExceeded
from ..payloads import check_result, decode_payload, error_record
from ..retry import RetryPolicy, decide
from .config import WorkerConfig
from .db import CONNECTION_ERRORS, Connection
from .outcomes import OutcomeBuffer
from .slots import SlotTable

logger = logging.getLogger("jobs.worker")

EXIT_OK = 0
# Asked to exit after --max-jobs-per-child jobs: the supervisor starts a fresh one.
EXIT_RECYCLE = 3


class Executor:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        index: int,
        token: uuid.UUID,
        slots: SlotTable,
        supervisor_pid: int | None = None,
    ) -> None:
        self.config = config
        self.index = index
        self.token = token
        self.slots = slots
        self.supervisor_pid = supervisor_pid
        self.stopping = False
        # Set by a NOTIFY that arrived with a statement's reply, after the socket was read.
        self.notified = False
        # True only while a handler runs: the soft time limit may interrupt nothing else.
        self.in_handler = False
        self.batch_size = 1
        # The queue order of the last claim.
        self.claimed_from: list[str] = []
        self.shortest_lease = config.lease_seconds
        # The jobs of the batch being run: claimed under our token, not yet given back.
        self.batch_ids: list[uuid.UUID] = []
        self.jobs_run = 0
        self.tasks: dict[str, tuple[Task, RetryPolicy, inspect.Signature]] = {}
        self.default_policy = _default_policy()
        self.wake_r, self.wake_w = os.pipe()
        self.db = Connection(
            config.database,
            name=f"jobs-executor-{index}",
            on_connect=self._on_connect,
            should_stop=lambda: self.stopping,
        )
        self.db_lock = threading.Lock()
        self.outcomes = OutcomeBuffer(self.db, token=token, db_lock=self.db_lock)

    # --- process plumbing ---------------------------------------------------------

    def _install_signals(self) -> None:
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        # Ctrl-C reaches the whole process group; the supervisor decides what it means.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, self._on_soft_time_limit)
        _die_with_parent(self.supervisor_pid)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _on_soft_time_limit(self, signum: int, frame: object) -> None:
        if self.in_handler:
            raise SoftTimeLimitExceeded("soft time limit exceeded")

    def _on_notify(self, notify: Any) -> None:
        self.notified = True

    def _on_connect(self, conn: Any) -> None:
        if self.config.listen:
            # A handler also keeps psycopg from queueing every notification in memory.
            conn.add_notify_handler(self._on_notify)
            conn.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
        # A claim that committed while its reply was lost leaves rows under our token that
        # nobody runs; hand them back. The batch in hand is ours to finish: the
        # connection may have been lost while writing an outcome in the middle of it.
        keep = [str(job_id) for job_id in (*self.batch_ids, *self.outcomes.ids())]
        released = store.release(conn.cursor(), worker=self.token, keep=keep)
        if released:
            logger.warning("event=orphans_released count=%d", len(released))

    # --- main loop ----------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        _keep_django_connections()
        self.outcomes.start()
        try:
            while not self.stopping:
                self.notified = False
                with self.db_lock:
                    rows = self.db.run(self._claim)
                if any(row[11] for row in rows):
                    for row in rows:
                        if row[11]:
                            self._log(row, time.monotonic(), "expired")
                    rows = [row for row in rows if not row[11]]
                    if not rows:
                        continue
                if not rows:
                    self.flush()
                    if self.config.burst:
                        break
                    self._wait_for_work()
                    continue
                self._run_batch(rows)
                if self.config.max_jobs_per_child and self.jobs_run >= self.config.max_jobs_per_child:
                    self.flush()
                    return EXIT_RECYCLE
            self.flush()
            return EXIT_OK
        finally:
            self.outcomes.close()
            self.db.drop()

    def _claim(self, cursor: Any) -> list[tuple[Any, ...]]:
        self.claimed_from = self.config.queue_order()
        return store.claim(
            cursor,
            worker=self.token,
            queues=self.claimed_from,
            limit=self.batch_size,
            lease_seconds=self.config.lease_seconds,
            default_timeout=self.config.default_timeout or None,
        )

    def _wait_for_work(self) -> None:
        if self.notified:
            # Work was announced while the last claim ran, perhaps after its snapshot.
            return
        fds = [self.wake_r]
        sock = self.db.fileno() if self.config.listen else None
        if sock is not None:
            fds.append(sock)
        readable, _, _ = select.select(fds, [], [], self.config.poll_interval)
        if self.wake_r in readable:
            os.read(self.wake_r, 4096)
        if sock is not None and sock in readable:
            self._consume_notifications()

    def _consume_notifications(self) -> None:
        # Which queue woke us does not matter: the claim looks at all of ours.
        with self.db_lock:
            if self.db.conn is None:
                return
            pgconn = self.db.conn.pgconn
            try:
                pgconn.consume_input()
                while pgconn.notifies() is not None:
                    pass
            except CONNECTION_ERRORS as exc:
                # The listening connection is gone; the next claim reconnects and listens.
                self.db.lost(exc)

    def _run_batch(self, rows: list[tuple[Any, ...]]) -> None:
        started = time.monotonic()
        # UPDATE ... RETURNING gives no order: run the batch as the claim chose it, queue by
        # queue (row[9]) in the order visited, higher priority (row[10]) first.
        rank = {name: position for position, name in enumerate(self.claimed_from)}
        rows.sort(key=lambda row: (rank.get(row[9], 0), -row[10]))
        self.batch_ids = [row[0] for row in rows]
        # Jobs waiting their turn in the batch are under lease too: the supervisor beats
        # at a third of the shortest lease in hand.
        self.shortest_lease = min(row[7] for row in rows)
        try:
            for position, row in enumerate(rows):
                if self.stopping:
                    unstarted = [r[0] for r in rows[position:]]
                    self.flush()
                    with self.db_lock:
                        self.db.run(partial(store.release, worker=self.token, ids=unstarted))
                    logger.info("event=released count=%d reason=shutdown", len(unstarted))
                    return
                if row[6] is not None or row[4] > 1:
                    # A job with a time limit (row[6]) may get this process killed, and so
                    # may a retry (row[4]: the attempt), which failed once already, maybe
                    # by killing its process: write what is finished first.
                    self.flush()
                self.outcomes.add(self._execute(row))
            elapsed = time.monotonic() - started
            # Size the next claim to what this executor can finish within the horizon, so
            # a fast queue is drained in large batches and slow jobs are taken one at a time.
            per_job = max(elapsed / len(rows), 1e-6)
            self.batch_size = max(1, min(self.config.max_batch, int(self.config.prefetch_horizon / per_job)))
            self.flush()
        finally:
            self.batch_ids = []

    def flush(self) -> None:
        self.outcomes.flush()

    # --- one attempt --------------------------------------------------------------

    def _execute(self, row: tuple[Any, ...]) -> dict[str, Any]:
        (job_id, task_path, args, kwargs, attempt, max_attempts, timeout, lease_seconds,
         _trace_id, _queue_name, _priority, *_) = row  # fmt: skip
        started = time.monotonic()
        outcome: dict[str, Any] = {"id": str(job_id), "attempt": attempt}
        try:
            task, policy, signature = self._resolve(task_path)
            args, kwargs = decode_payload(args, kwargs, signature, task.takes_context)
        except JobsError as exc:
            # The row cannot run at all: retrying would fail the same way.
            outcome.update(state="dead", error=error_record(exc))
            self._log(row, started, "dead", exc)
            return outcome
        policy = replace(policy, max_attempts=max_attempts)
        soft = task.soft_timeout if isinstance(task, JobTask) else None
        self.slots.start(
            self.index,
            job_id,
            attempt,
            started,
            started + timeout if timeout else 0.0,
            min(lease_seconds, self.shortest_lease),
        )
        running: TaskResult | None = None
        if (
            task.takes_context
            or signals.observed(signals.task_started)
            or signals.observed(signals.task_finished)
        ):
            running = self._task_result(task, row, args, kwargs)
            if signals.observed(signals.task_started):
                signals.task_started.send(sender=type(task.get_backend()), task_result=running)
        try:
            if task.takes_context:
                context: Any = TaskContext(task_result=cast(TaskResult, running))
                value = self._call(task, soft, context, *args, **kwargs)
            else:
                value = self._call(task, soft, *args, **kwargs)
            outcome.update(state="succeeded", result=check_result(value))
            self._log(row, started, "succeeded")
            if running is not None and signals.observed(signals.task_finished):
                signals.send_finished(type(task.get_backend()), running, value=value)
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
            decision = decide(exc, attempt=attempt, policy=policy)
            if decision.state == "dead" and running is not None and signals.observed(signals.task_finished):
                signals.send_finished(type(task.get_backend()), running, error=exc)
            outcome.update(state=decision.state, delay=decision.delay, error=error_record(exc))
            if decision.refund:
                outcome["refund"] = 1
                outcome.pop("error")
            label = "snoozed" if decision.refund else ("retry" if decision.state == "queued" else "dead")
            self._log(row, started, label, exc, decision.reason)
        finally:
            self.slots.clear(self.index)
            self.jobs_run += 1
            close_old_connections()
        return outcome

    def _call(self, task: Task, soft: float | None, *args: Any, **kwargs: Any) -> Any:
        """Run the handler; with a soft limit, SoftTimeLimitExceeded is raised inside it
        when the limit passes, and nowhere else."""
        self.in_handler = True
        if soft:
            signal.setitimer(signal.ITIMER_REAL, soft)
        try:
            return task.call(*args, **kwargs)
        finally:
            # A limit that passes right here still raises from within this call.
            self.in_handler = False
            if soft:
                signal.setitimer(signal.ITIMER_REAL, 0)

    def _resolve(self, task_path: str) -> tuple[Task, RetryPolicy, inspect.Signature]:
        cached = self.tasks.get(task_path)
        if cached is None:
            task = resolve_task(task_path)
            policy = task.retry_policy() if isinstance(task, JobTask) else self.default_policy
            cached = (task, policy, inspect.signature(task.func))
            self.tasks[task_path] = cached
        return cached

    def _task_result(
        self, task: Task, row: tuple[Any, ...], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult:
        attempt = row[4]
        return TaskResult(
            task=task,
            id=str(row[0]),
            status=TaskResultStatus.RUNNING,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=task.backend,
            errors=[],
            # One entry per attempt so that context.attempt is right.
            worker_ids=[""] * (attempt - 1) + [str(self.token)],
        )

    def _log(
        self,
        row: tuple[Any, ...],
        started: float,
        outcome: str,
        error: BaseException | None = None,
        reason: str = "",
    ) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        line = (
            f"job={row[0]} task={row[1]} queue={row[9]} attempt={row[4]}/{row[5]} "
            f"duration_ms={(time.monotonic() - started) * 1000:.1f} outcome={outcome} "
            f"trace_id={row[8]}"
        )
        if error is not None:
            line += f" error={type(error).__name__}: {str(error)[:200]!r}"
        if reason:
            line += f" reason={reason!r}"
        logger.log(logging.WARNING if outcome == "dead" else logging.INFO, line)


def _keep_django_connections() -> None:
    """Handlers' ORM connections live as long as the executor, as in any long-running
    process: CONN_MAX_AGE=0 would reconnect for every job (milliseconds each). A connection
    a handler left broken is still closed after its job (close_old_connections)."""
    for conn in connections.all(initialized_only=False):
        conn.settings_dict["CONN_MAX_AGE"] = None


def _default_policy() -> RetryPolicy:
    conf = jobs_settings()
    return RetryPolicy(
        max_attempts=conf.DEFAULT_MAX_ATTEMPTS, backoff_base=conf.BACKOFF_BASE, backoff_cap=conf.BACKOFF_CAP
    )


def _die_with_parent(supervisor_pid: int | None) -> None:
    """Ask Linux to SIGKILL this process when the supervisor dies, so no executor runs
    on unsupervised (its jobs then come back through the lease)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        logger.debug("event=pdeathsig_unavailable")
    # The supervisor may have died between the fork and the prctl: nobody would tell us.
    if supervisor_pid is not None and os.getppid() != supervisor_pid:
        os._exit(1)
