"""The ``runworker`` process: supervises its executor processes and its housekeeper.

Process model: the supervisor forks one housekeeper (housekeeper.py: every database
statement the worker makes besides its executors' own) and ``--concurrency`` executors
(executor.py: claim, run, record). The supervisor itself never touches the database, so
nothing the database does (hang, refuse, vanish) can delay what only it can do:

* kill an executor whose handler overruns its hard time limit (a ``while True: pass`` or
  a blocking C call cannot be interrupted from inside), race-free: the executor is stopped
  (SIGSTOP) and its slot entry read again before the kill, so the job killed for is the job
  recorded;
* notice an executor that died (``os._exit``, a signal, the OOM killer), have the
  housekeeper record the attempts it ran as failed and give its unstarted jobs back, and
  start a new one, with a capped, jittered backoff while executors keep dying, saying why
  once per streak instead of on every death;
* restart the housekeeper when it dies, stops making progress (a statement that never
  comes back), or lets a lease extension run late (its session froze): the executors stop
  claiming until leases are extended again, well before the ones in hand run out;
* turn SIGTERM/SIGINT into a graceful shutdown, and a second signal into an exit.

Its pieces live beside it: the process table's entries and the respawn policy
(children.py), the hard time limits (time_limits.py), how a child is forked (forking.py),
what a dead executor's attempts failed with (settlement.py), and the watch over the
housekeeper: its fork, restarts, pipes and the claims held meanwhile (housekeeper_watch.py).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import RawValue
from typing import Any

from django.db import connections

from .children import Child, Streak, record_death, worth_reporting
from .config import WorkerConfig
from .executor import EXIT_OK, EXIT_RECYCLE, Executor
from .forking import fork_child
from .housekeeper_watch import HousekeeperWatch
from .metrics import MetricsTable
from .settlement import lost_executor_failures
from .slots import Running, SlotTable
from .time_limits import enforce_time_limits, kill_if_unchanged, send_signal

logger = logging.getLogger("jobs.worker")

TICK = 0.05


@dataclass
class Supervisor:
    config: WorkerConfig
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    children: dict[int, Child] = field(default_factory=dict)
    signals_received: int = 0
    shutdown_deadline: float | None = None

    def __post_init__(self) -> None:
        concurrency = self.config.concurrency
        self.slots = SlotTable(concurrency, self.config.slot_entries)
        self.async_entries = set(range(max(1, self.config.threads), self.config.slot_entries))
        # One wake pipe per executor slot, kept across respawns: the housekeeper writes a
        # byte to wake them (a NOTIFY), signals write theirs (set_wakeup_fd).
        self.wake = [os.pipe() for _ in range(concurrency)]
        for _, write in self.wake:
            os.set_blocking(write, False)
        self.streaks = [Streak() for _ in range(concurrency)]
        self.pending_spawn: set[int] = set()
        # Metrics (metrics.py): a region per executor slot and one for the housekeeper, and
        # the word the housekeeper's /metrics reads of the supervisor's state.
        self.metrics = MetricsTable(concurrency + 1) if self.config.metrics_port else None
        self.executors_alive = RawValue("i", 0)
        self.housekeeper = HousekeeperWatch(
            self.config,
            worker_id=self.id,
            slots=self.slots,
            wake_fds=[write for _, write in self.wake],
            metrics=self.metrics,
            executors_alive=self.executors_alive,
            finishing=lambda: self.shutdown_deadline is not None and not self.children,
        )

    # --- lifecycle ----------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        logger.info(
            "event=worker_started worker=%s pid=%d queues=%s concurrency=%d threads=%d async=%d burst=%s",
            self.id,
            os.getpid(),
            ",".join(f"{n}:{w}" for n, w in self.config.queues),
            self.config.concurrency,
            self.config.threads,
            self.config.async_concurrency,
            self.config.burst,
        )
        # Close Django's connections once: no child may inherit an open socket.
        connections.close_all()
        # Executors first: they start claiming while the housekeeper is still connecting.
        for index in range(self.config.concurrency):
            self._spawn(index)
        housekeeper = self.housekeeper
        housekeeper.spawn()
        while self.children or self.pending_spawn:
            self._collect_children()
            self.executors_alive.value = len(self.children)
            now = time.monotonic()
            self._respawn_due(now)
            self._enforce_time_limits(now)
            housekeeper.watch(now)
            housekeeper.read_acks()
            if self.shutdown_deadline is not None and now >= self.shutdown_deadline:
                self._kill_all("shutdown timeout")
                self.shutdown_deadline = float("inf")
            readable, _, _ = select.select([wake_r, *housekeeper.ack_fds()], [], [], TICK)
            if wake_r in readable:
                os.read(wake_r, 4096)
        housekeeper.stop(wake_r, tick=TICK)
        logger.info("event=worker_stopped worker=%s", self.id)
        return 0

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals_received += 1
        if self.signals_received == 1:
            in_hand = sum(len(self.slots.running(child.index)) for child in self.children.values())
            logger.info(
                "event=shutdown_requested signal=%s timeout=%.1fs running=%d",
                signal.Signals(signum).name,
                self.config.shutdown_timeout,
                in_hand,
            )
            if in_hand:
                logger.info(
                    "event=shutdown_waiting jobs=%d timeout=%.1fs (waiting up to %gs for %d running job%s)",
                    in_hand,
                    self.config.shutdown_timeout,
                    self.config.shutdown_timeout,
                    in_hand,
                    "" if in_hand == 1 else "s",
                )
            self.shutdown_deadline = time.monotonic() + self.config.shutdown_timeout
            self.pending_spawn.clear()
            for child in self.children.values():
                send_signal(child.pid, signal.SIGTERM)
        else:
            # A second signal: leave now; the leases bring the jobs in hand back.
            logger.warning("event=shutdown_forced signal=%s", signal.Signals(signum).name)
            for child in self.children.values():
                send_signal(child.pid, signal.SIGKILL)
            if self.housekeeper.pid is not None:
                send_signal(self.housekeeper.pid, signal.SIGKILL)
            os._exit(1)

    # --- forking ------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        token = uuid.uuid4()
        supervisor_pid = os.getpid()
        # Named before the fork, so that the housekeeper heartbeats its jobs from the start.
        self.slots.reset(index, token)
        wake_r, wake_w = self.wake[index]

        def target() -> int:
            return Executor(
                self.config,
                index=index,
                token=token,
                slots=self.slots,
                supervisor_pid=supervisor_pid,
                wake_r=wake_r,
                wake_w=wake_w,
                metrics=self.metrics,
                claims_held=self.housekeeper.claims_held,
            ).run()

        pid = fork_child(target)
        self.slots.set_executor(index, token, pid)
        self.children[pid] = Child(index=index, pid=pid, token=token, started=time.monotonic())
        if self.shutdown_deadline is not None:
            # Forked as the shutdown began: it stops at once, having claimed nothing.
            send_signal(pid, signal.SIGTERM)

    # --- executors ----------------------------------------------------------------

    def _collect_children(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if pid == self.housekeeper.pid:
                self.housekeeper.exited(code)
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            if code in (EXIT_OK, EXIT_RECYCLE) and child.killed_for is None:
                self.streaks[child.index] = Streak()
                # Burst executors leave when the queue is empty; recycled ones are replaced.
                if self.shutdown_deadline is None and (code == EXIT_RECYCLE or not self.config.burst):
                    self._spawn(child.index)
                else:
                    self._settle(child, [], "executor exited")
                continue
            self._lost_executor(child, code)
            if self.shutdown_deadline is None:
                self._schedule_respawn(child, code)

    def _lost_executor(self, child: Child, code: int) -> None:
        """An executor died or was killed: have the attempts it ran recorded as failed and
        the rest of its jobs given back."""
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        running = [running for _, running in self.slots.running(child.index)]
        failed = lost_executor_failures(child.killed_for, running, how)
        logger.warning(
            "event=executor_lost index=%d pid=%d how=%r running=%d", child.index, child.pid, how, len(running)
        )
        self._settle(child, failed, f"executor process died ({how})", refund_running=child.killed_at_shutdown)

    def _settle(self, child: Child, failed: list[Any], reason: str, *, refund_running: bool = False) -> None:
        self.housekeeper.settle(child.token, failed, reason, refund_running=refund_running)
        self.slots.clear_all(child.index)

    def _schedule_respawn(self, child: Child, code: int) -> None:
        streak = self.streaks[child.index]
        now = time.monotonic()
        delay = record_death(streak, lived=now - child.started)
        streak.respawn_at = now + delay
        if worth_reporting(streak.deaths):
            logger.error(
                "event=executor_crash_loop index=%d deaths_in_a_row=%d respawn_in=%.1fs last_exit=%s",
                child.index,
                streak.deaths,
                delay,
                f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}",
            )
        self.pending_spawn.add(child.index)

    def _respawn_due(self, now: float) -> None:
        for index in sorted(self.pending_spawn):
            if self.shutdown_deadline is not None:
                self.pending_spawn.discard(index)
            elif now >= self.streaks[index].respawn_at:
                self.pending_spawn.discard(index)
                self._spawn(index)

    def _enforce_time_limits(self, now: float) -> None:
        enforce_time_limits(self.slots, self.async_entries, list(self.children.values()), now)

    def _kill_if_unchanged(self, child: Child, entry: int, seq: int, running: Running) -> bool:
        return kill_if_unchanged(self.slots, child, entry, seq, running)

    def _kill_all(self, reason: str) -> None:
        for child in self.children.values():
            logger.warning("event=executor_killed pid=%d reason=%r", child.pid, reason)
            child.killed_at_shutdown = True
            send_signal(child.pid, signal.SIGKILL)
