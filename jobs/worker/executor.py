"""An executor process: its lanes run handlers (lanes.py), its feeder thread claims and
records on its one connection (feeder.py). The supervisor forks ``--concurrency`` of them
and may kill one whose handler overruns its hard time limit.

Invariants kept here (ARCHITECTURE.md): one claim statement sized to what the executor can
start soon (2), the attempt counted by the claim (3) and its start marked before the task
is even imported (slot entry) or written to the job row (feeder), every later write fenced
on claim token and attempt (4), no transaction open while a handler runs - the connection
is in autocommit (5).
"""

from __future__ import annotations

import logging
import os
import signal
import uuid
from typing import Any

from django.db import connections

from .. import observe, store
from ..db import Connection
from .attempt import Attempts
from .config import WorkerConfig
from .feeder import Feeder
from .joblog import JobLog
from .lane_rows import ASYNC, INLINE, THREADS, LaneRows
from .lanes import AsyncLane, Context, InlineLane, ThreadLane
from .metrics import MetricsTable, Publisher
from .slots import SlotTable

logger = logging.getLogger("jobs.worker")

EXIT_OK = 0
# Asked to exit after --max-jobs-per-child jobs: the supervisor starts a fresh one.
EXIT_RECYCLE = 3
# Something in the executor's own machinery failed (not a handler): start a fresh one.
EXIT_CRASHED = 4


class Executor:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        index: int,
        token: uuid.UUID,
        slots: SlotTable,
        supervisor_pid: int | None = None,
        wake_r: int | None = None,
        wake_w: int | None = None,
        metrics: MetricsTable | None = None,
        claims_held: Any = None,
    ) -> None:
        self.config = config
        self.index = index
        self.token = token
        self.slots = slots
        self.supervisor_pid = supervisor_pid
        self.wake_r = wake_r
        self.wake_w = wake_w
        threads = config.threads
        entries = list(range(config.slot_entries))
        lanes: dict[str, LaneRows] = {}
        if threads:
            lanes[THREADS] = LaneRows(THREADS, entries[:threads])
        else:
            lanes[INLINE] = LaneRows(INLINE, entries[:1])
        if config.async_concurrency:
            lanes[ASYNC] = LaneRows(ASYNC, entries[max(1, threads) :])
        self.connected_before = False
        self.db = Connection(
            config.database,
            name=f"jobs-executor-{index}",
            on_connect=self._on_connect,
            should_stop=lambda: self.feeder.stopping,
        )
        # This executor's counts start from what its slot's earlier executors counted.
        self.publisher = Publisher(metrics, index) if metrics is not None else None
        tally = self.publisher.tally if self.publisher is not None else None
        # Attempts that did not succeed are counted and logged once their outcome's write
        # says how their job ended (joblog.py).
        log = JobLog(tally, defer_failures=True)
        self.feeder = Feeder(
            config,
            token=token,
            db=self.db,
            lanes=lanes,
            wake_fd=wake_r,
            publisher=self.publisher,
            claims_held=claims_held,
            log=log,
        )
        self.attempts = Attempts(config, token=token, log=log)
        if tally is not None:
            # Jobs the handlers enqueue.
            observe.set_enqueued_sink(tally.count_enqueued)
        self.attempts.progress_sink = self.feeder.report_progress
        self.ctx = Context(index=index, attempts=self.attempts, feeder=self.feeder, slots=slots)

    def _on_connect(self, conn: Any) -> None:
        if self.config.listen_in_executors:
            # Wake-ups come to this connection; the feeder hears them during its statements
            # and while it waits (feeder.py).
            conn.add_notify_handler(self.feeder.heard)
            store.listen(conn)
        # A claim that committed while its reply was lost leaves rows under our token that
        # nobody runs: hand them back. What is in hand is ours to finish (the connection may
        # have been lost in the middle of writing an outcome). The first connection has
        # nothing to look for: the token is new with this process (the supervisor makes one
        # per fork) and nothing has claimed with it yet; skipping the look saves a statement
        # on the way to the first job.
        if not self.connected_before:
            self.connected_before = True
            return
        released = store.release(conn.cursor(), worker=self.token, keep=self.feeder.in_hand())
        if released:
            logger.warning("event=orphans_released count=%d", len(released))

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.feeder.stop()

    def run(self) -> int:
        """The process: returns its exit code."""
        if self.wake_w is not None:
            os.set_blocking(self.wake_w, False)
            signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        # Ctrl-C reaches the whole process group; the supervisor decides what it means.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        die_with_parent(self.supervisor_pid)
        name_process(f"jobs-executor{self.index}")
        _keep_django_connections()
        lanes = self.feeder.lanes
        inline = InlineLane(self.ctx, lanes[INLINE]) if INLINE in lanes else None
        pool = ThreadLane(self.ctx, lanes[THREADS]) if THREADS in lanes else None
        loop = AsyncLane(self.ctx, lanes[ASYNC]) if ASYNC in lanes else None
        self.feeder.start()
        for lane in (pool, loop):
            if lane is not None:
                lane.start()
        try:
            if inline is not None:
                inline.serve(lanes[INLINE].entries[0])
            assert self.feeder.thread is not None
            while self.feeder.thread.is_alive():
                # Woken for signals; the feeder ends when the work in hand is done.
                self.feeder.thread.join(0.2)
            for lane in (pool, loop):
                if lane is not None:
                    lane.join(5.0)
        finally:
            if self.publisher is not None:
                self.publisher.publish()
            self.db.drop()
            self.feeder.close()
        if self.feeder.crashed:
            return EXIT_CRASHED
        return EXIT_RECYCLE if self.feeder.recycle else EXIT_OK


def _keep_django_connections() -> None:
    """Handlers' ORM connections live as long as the executor, as in any long-running
    process: CONN_MAX_AGE=0 would reconnect for every job (milliseconds each). A connection
    a handler left broken is still closed after its job (close_old_connections)."""
    for conn in connections.all(initialized_only=False):
        conn.settings_dict["CONN_MAX_AGE"] = None


def name_process(name: str) -> None:
    """Give this process a name of its own in ps and top (the kernel keeps 15 bytes)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_name = 15
        libc.prctl(pr_set_name, name.encode()[:15])
    except OSError:
        logger.debug("event=set_name_unavailable")


def die_with_parent(supervisor_pid: int | None) -> None:
    """Ask Linux to SIGKILL this process when the supervisor dies, so no part of a worker
    runs on unsupervised (its jobs then come back through the lease)."""
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
