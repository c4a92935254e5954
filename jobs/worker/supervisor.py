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
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import RawValue
from pathlib import Path
from typing import Any

from django.db import connections

from .. import otel
from ..exceptions import ProcessDied, TimeLimitExceeded
from ..retry import backoff
from .beats import beat_late_after
from .config import WorkerConfig
from .executor import EXIT_OK, EXIT_RECYCLE, Executor
from .housekeeper import Housekeeper
from .metrics import MetricsTable
from .settlement import Settlement, failed_attempt
from .slots import Running, SlotTable

logger = logging.getLogger("jobs.worker")

TICK = 0.05
HANDLED_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
# An async handler past its hard limit is cancelled by its own event loop; the process is
# killed only if the loop has not managed that this long after the limit (it is blocked).
ASYNC_KILL_GRACE = 2.0
# How long a stopped executor may take to reach the stopped state before it is killed
# on the strength of the first reading.
STOP_PATIENCE = 1.0
# Respawn backoff while executors die in a row: base, cap (seconds). An executor that
# lived this long ends a streak.
RESPAWN_BASE = 0.5
RESPAWN_CAP = 30.0
HEALTHY_AFTER = 10.0
# The housekeeper is restarted when its loop has not turned for this long, or sooner when
# a lease extension is late (beats.BEAT_LATE_AFTER).
HOUSEKEEPER_STUCK = 10.0
# How long an exiting worker waits for the housekeeper to settle what its executors left;
# after that their leases run out and the reaper takes them back.
SETTLE_AT_EXIT = 5.0


@dataclass
class Child:
    index: int
    pid: int
    token: uuid.UUID
    started: float
    # Set when the supervisor killed it for overrunning: (job id, attempt, limit).
    killed_for: tuple[uuid.UUID, int, float] | None = None
    # Set when the shutdown timeout ran out: its jobs go back without using an attempt.
    killed_at_shutdown: bool = False


@dataclass
class Streak:
    """Consecutive deaths of the executor in one slot, for the respawn backoff."""

    deaths: int = 0
    respawn_at: float = 0.0


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
        self.housekeeper_pid: int | None = None
        self.housekeeper_started = 0.0
        # A dead housekeeper's successor is forked at this time (monotonic), not slept for:
        # the time limits must go on meanwhile.
        self.housekeeper_respawn_at: float | None = None
        self.progress = RawValue("d", 0.0)
        # When the housekeeper's next lease extension is late (monotonic; it moves the word
        # on at each extension), and whether the executors hold their claims meanwhile.
        self.beat_late_at = RawValue("d", float("inf"))
        self.claims_held = RawValue("i", 0)
        # Since when (wall clock, as the last_beat word) the claims are held: they resume
        # at the first lease extension after it.
        self.held_since = 0.0
        self.settlements: dict[int, Settlement] = {}
        self.settlement_seq = 0
        self.commands: tuple[int, int] | None = None
        self.acks: tuple[int, int] | None = None
        self.ack_buffer = b""
        self.housekeeper_deaths = 0
        # Metrics (metrics.py): a region per executor slot and one for the housekeeper, and
        # the words the housekeeper's /metrics reads of the supervisor's state.
        self.metrics = MetricsTable(concurrency + 1) if self.config.metrics_port else None
        self.executors_alive = RawValue("i", 0)
        self.last_beat = RawValue("d", 0.0)

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
        self._spawn_housekeeper()
        while self.children or self.pending_spawn:
            self._collect_children()
            self.executors_alive.value = len(self.children)
            now = time.monotonic()
            self._respawn_due(now)
            self._enforce_time_limits(now)
            self._watch_housekeeper(now)
            self._read_acks()
            if self.shutdown_deadline is not None and now >= self.shutdown_deadline:
                self._kill_all("shutdown timeout")
                self.shutdown_deadline = float("inf")
            readable, _, _ = select.select([wake_r, *self._ack_fds()], [], [], TICK)
            if wake_r in readable:
                os.read(wake_r, 4096)
        self._stop_housekeeper(wake_r)
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
                _signal(child.pid, signal.SIGTERM)
        else:
            # A second signal: leave now; the leases bring the jobs in hand back.
            logger.warning("event=shutdown_forced signal=%s", signal.Signals(signum).name)
            for child in self.children.values():
                _signal(child.pid, signal.SIGKILL)
            if self.housekeeper_pid is not None:
                _signal(self.housekeeper_pid, signal.SIGKILL)
            os._exit(1)

    # --- forking ------------------------------------------------------------------

    def _fork(self, target: Any) -> int:
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
                code = target()
            except BaseException:
                logger.exception("event=child_crashed")
            finally:
                otel.flush()
                logging.shutdown()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return pid

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
                claims_held=self.claims_held,
            ).run()

        pid = self._fork(target)
        self.slots.set_executor(index, token, pid)
        self.children[pid] = Child(index=index, pid=pid, token=token, started=time.monotonic())
        if self.shutdown_deadline is not None:
            # Forked as the shutdown began: it stops at once, having claimed nothing.
            _signal(pid, signal.SIGTERM)

    def _spawn_housekeeper(self) -> None:
        for pipe in (self.commands, self.acks):
            if pipe is not None:
                for fd in pipe:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        self.commands = os.pipe()
        self.acks = os.pipe()
        commands_r, commands_w = self.commands
        acks_r, acks_w = self.acks
        self.housekeeper_respawn_at = None
        self.progress.value = time.monotonic()
        # A new housekeeper has this long to connect and extend the leases in hand.
        self.beat_late_at.value = self.progress.value + beat_late_after(self.config.lease_seconds)

        def target() -> int:
            os.close(commands_w)
            os.close(acks_r)
            return Housekeeper(
                self.config,
                worker_id=self.id,
                slots=self.slots,
                wake_fds=[write for _, write in self.wake],
                commands_r=commands_r,
                acks_w=acks_w,
                progress=self.progress,
                metrics=self.metrics,
                executors_alive=self.executors_alive,
                last_beat_word=self.last_beat,
                beat_late_word=self.beat_late_at,
            ).run()

        self.housekeeper_pid = self._fork(target)
        self.housekeeper_started = time.monotonic()
        os.close(commands_r)
        os.close(acks_w)
        self.commands = (-1, commands_w)
        self.acks = (acks_r, -1)
        os.set_blocking(commands_w, False)
        # Whatever was not acknowledged goes to the new one (settling twice is harmless).
        for settlement in self.settlements.values():
            self._send(settlement.message())
        if self.shutdown_deadline is not None and not self.children:
            self._send(b"stop\n")

    def _send(self, message: bytes) -> None:
        if self.commands is None:
            return
        try:
            os.write(self.commands[1], message)
        except (BlockingIOError, BrokenPipeError, OSError):
            # Resent when the housekeeper is restarted.
            logger.warning("event=housekeeper_unreachable")

    def _ack_fds(self) -> list[int]:
        return [self.acks[0]] if self.acks is not None and self.acks[0] >= 0 else []

    def _read_acks(self) -> None:
        for fd in self._ack_fds():
            readable, _, _ = select.select([fd], [], [], 0)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            self.ack_buffer += chunk
            *lines, self.ack_buffer = self.ack_buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self.settlements.pop(int(line), None)

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
            if pid == self.housekeeper_pid:
                self._housekeeper_exited(code)
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
        failed = []
        if child.killed_for is not None:
            job_id, attempt, limit = child.killed_for
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
                            ProcessDied(
                                f"executor process killed: job {job_id} exceeded its hard time limit"
                            ),
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
        logger.warning(
            "event=executor_lost index=%d pid=%d how=%r running=%d", child.index, child.pid, how, len(running)
        )
        self._settle(child, failed, f"executor process died ({how})", refund_running=child.killed_at_shutdown)

    def _settle(self, child: Child, failed: list[Any], reason: str, *, refund_running: bool = False) -> None:
        self.settlement_seq += 1
        settlement = Settlement(
            seq=self.settlement_seq,
            token=child.token,
            failed=failed,
            reason=reason,
            refund_running=refund_running,
        )
        self.settlements[settlement.seq] = settlement
        self._send(settlement.message())
        self.slots.clear_all(child.index)

    def _schedule_respawn(self, child: Child, code: int) -> None:
        streak = self.streaks[child.index]
        now = time.monotonic()
        if now - child.started >= HEALTHY_AFTER:
            streak.deaths = 0
        streak.deaths += 1
        delay = 0.0
        if streak.deaths > 1:
            delay = backoff(streak.deaths - 1, base=RESPAWN_BASE, cap=RESPAWN_CAP, spread=0.25)
        streak.respawn_at = now + delay
        # Once per streak, then at 2, 4, 8... deaths: why, not a line per crash.
        if streak.deaths & (streak.deaths - 1) == 0 and streak.deaths > 1:
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
        for child in list(self.children.values()):
            if child.killed_for is not None:
                continue
            for entry in range(self.slots.entries):
                snapshot = self.slots.snapshot(child.index, entry)
                running = snapshot.running
                if running is None or not running.deadline:
                    continue
                grace = ASYNC_KILL_GRACE if entry in self.async_entries else 0.0
                if now > running.deadline + grace and self._kill_if_unchanged(
                    child, entry, snapshot.seq, running
                ):
                    break

    def _kill_if_unchanged(self, child: Child, entry: int, seq: int, running: Running) -> bool:
        """Stop the executor, read the entry again, and kill only if it still runs the same
        attempt (between the first reading and the kill the job may have finished and the
        next started)."""
        _signal(child.pid, signal.SIGSTOP)
        _wait_stopped(child.pid)
        again = self.slots.snapshot(child.index, entry)
        if again.seq != seq or again.running != running:
            _signal(child.pid, signal.SIGCONT)
            return False
        child.killed_for = (running.job_id, running.attempt, running.deadline - running.started)
        logger.warning(
            "event=time_limit job=%s attempt=%d pid=%d", running.job_id, running.attempt, child.pid
        )
        _signal(child.pid, signal.SIGKILL)
        return True

    def _kill_all(self, reason: str) -> None:
        for child in self.children.values():
            logger.warning("event=executor_killed pid=%d reason=%r", child.pid, reason)
            child.killed_at_shutdown = True
            _signal(child.pid, signal.SIGKILL)

    # --- the housekeeper ----------------------------------------------------------------

    def _housekeeper_exited(self, code: int) -> None:
        self.housekeeper_pid = None
        stopping = self.shutdown_deadline is not None and not self.children
        if stopping and code == 0:
            return
        self.housekeeper_deaths += 1
        logger.warning("event=housekeeper_lost code=%d deaths=%d", code, self.housekeeper_deaths)
        # The first successor at once (the leases in hand are waiting for it), later ones
        # after a growing, jittered pause while housekeepers keep dying.
        delay = 0.0
        if self.housekeeper_deaths > 1:
            delay = backoff(self.housekeeper_deaths - 1, base=RESPAWN_BASE, cap=RESPAWN_CAP, spread=1.0)
        self.housekeeper_respawn_at = time.monotonic() + delay

    def _watch_housekeeper(self, now: float) -> None:
        self._hold_claims(now > self.beat_late_at.value)
        if self.housekeeper_pid is None:
            if self.housekeeper_respawn_at is not None and now >= self.housekeeper_respawn_at:
                self._spawn_housekeeper()
            return
        if now - self.progress.value > HOUSEKEEPER_STUCK:
            logger.warning("event=housekeeper_stuck seconds=%.1f action=restart", now - self.progress.value)
            self._restart_housekeeper(now)
        elif now > self.beat_late_at.value:
            # Its session hangs in a statement (or cannot reach the database): a new
            # housekeeper on a new connection extends the leases before they run out.
            logger.warning(
                "event=housekeeper_stalled late_by=%.1fs action=restart claims=held",
                now - self.beat_late_at.value,
            )
            self._restart_housekeeper(now)
        elif now - self.housekeeper_started > HEALTHY_AFTER:
            self.housekeeper_deaths = 0

    def _restart_housekeeper(self, now: float) -> None:
        assert self.housekeeper_pid is not None
        self.progress.value = now
        # Until the successor has extended the leases (it moves the word on then).
        self.beat_late_at.value = float("inf")
        _signal(self.housekeeper_pid, signal.SIGKILL)

    def _hold_claims(self, late: bool) -> None:
        """Executors claim nothing from the moment a lease extension is late until leases
        are extended again: a job claimed meanwhile could outlive its lease and be run
        elsewhere while it still runs here."""
        if not self.claims_held.value:
            if late:
                self.claims_held.value = 1
                self.held_since = time.time()
                logger.warning("event=claims_held reason='lease extension late'")
            return
        if self.last_beat.value <= self.held_since:
            return
        self.claims_held.value = 0
        logger.info("event=claims_resumed held_for=%.1fs", time.time() - self.held_since)
        for _, write in self.wake:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(write, b"\0")

    def _stop_housekeeper(self, wake_r: int) -> None:
        if self.housekeeper_pid is None and self.housekeeper_respawn_at is not None:
            # Its successor was still to come: what the executors left needs settling.
            self._spawn_housekeeper()
        self._send(b"stop\n")
        deadline = time.monotonic() + SETTLE_AT_EXIT
        while self.housekeeper_pid is not None and time.monotonic() < deadline:
            try:
                pid, status = os.waitpid(self.housekeeper_pid, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self._read_acks()
                if os.waitstatus_to_exitcode(status) != 0 and self.settlements:
                    self._spawn_housekeeper()
                    self._send(b"stop\n")
                    continue
                self.housekeeper_pid = None
                break
            # Its SIGCHLD wakes this at once (the signal's wake-up pipe), not the next tick:
            # a burst worker exits as soon as its housekeeper does.
            if select.select([wake_r], [], [], TICK)[0]:
                os.read(wake_r, 4096)
        self._read_acks()
        if self.housekeeper_pid is not None:
            _signal(self.housekeeper_pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.housekeeper_pid, 0)
        if self.settlements:
            logger.error(
                "event=unsettled_at_exit executors=%d reason='database unavailable'", len(self.settlements)
            )


def _wait_stopped(pid: int) -> None:
    """Until ``pid`` is in the stopped state (or gone), at most STOP_PATIENCE."""
    deadline = time.monotonic() + STOP_PATIENCE
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            state = stat.read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return
        if state in "TtZX":
            return
        os.sched_yield()


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
