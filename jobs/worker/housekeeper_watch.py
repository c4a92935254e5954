"""The supervisor's watch over its housekeeper process (housekeeper.py).

It forks the housekeeper and talks to it through two pipes: settlements go down (what a
dead executor left, settlement.py), their sequence numbers come back up once written; a
settlement not acknowledged yet is sent again to the next housekeeper (settling twice is
harmless). It restarts the housekeeper when it dies (at once, then with a growing pause
while they keep dying), stops making progress (a statement that never comes back), or
lets a lease extension run late (its session froze); from the moment an extension is late
until the leases are extended again, the executors claim nothing. At exit it asks the
housekeeper to stop, once it has settled what the executors left.

The supervisor's loop calls ``watch``, ``read_acks`` and ``ack_fds`` each tick; all of it
runs in the supervisor's one thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
import uuid
from collections.abc import Callable
from multiprocessing.sharedctypes import RawValue
from typing import Any

from .beats import beat_late_after
from .children import housekeeper_health, housekeeper_respawn_delay
from .config import WorkerConfig
from .forking import fork_child
from .housekeeper import Housekeeper
from .metrics import MetricsTable
from .settlement import Settlement
from .slots import SlotTable
from .time_limits import send_signal

logger = logging.getLogger("jobs.worker")

# How long an exiting worker waits for the housekeeper to settle what its executors left;
# after that their leases run out and the reaper takes them back.
SETTLE_AT_EXIT = 5.0


class HousekeeperWatch:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        worker_id: uuid.UUID,
        slots: SlotTable,
        wake_fds: list[int],
        metrics: MetricsTable | None,
        executors_alive: Any,
        finishing: Callable[[], bool],
    ) -> None:
        self.config = config
        self.worker_id = worker_id
        self.slots = slots
        # The executors' wake pipes (write ends): a NOTIFY, or the claims resuming.
        self.wake_fds = wake_fds
        self.metrics = metrics
        self.executors_alive = executors_alive
        # Whether the worker is shutting down with no executor left (then a housekeeper's
        # clean exit is its last, and a new one is told to stop once it has settled).
        self.finishing = finishing
        self.pid: int | None = None
        self.started = 0.0
        # A dead housekeeper's successor is forked at this time (monotonic), not slept for:
        # the time limits must go on meanwhile.
        self.respawn_at: float | None = None
        self.deaths = 0
        self.progress = RawValue("d", 0.0)
        # When the housekeeper's next lease extension is late (monotonic; it moves the word
        # on at each extension), and whether the executors hold their claims meanwhile.
        self.beat_late_at = RawValue("d", float("inf"))
        self.claims_held = RawValue("i", 0)
        self.last_beat = RawValue("d", 0.0)
        # Since when (wall clock, as the last_beat word) the claims are held: they resume
        # at the first lease extension after it.
        self.held_since = 0.0
        self.settlements: dict[int, Settlement] = {}
        self.settlement_seq = 0
        self.commands: tuple[int, int] | None = None
        self.acks: tuple[int, int] | None = None
        self.ack_buffer = b""

    # --- the process --------------------------------------------------------------------

    def spawn(self) -> None:
        for pipe in (self.commands, self.acks):
            if pipe is not None:
                for fd in pipe:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        self.commands = os.pipe()
        self.acks = os.pipe()
        commands_r, commands_w = self.commands
        acks_r, acks_w = self.acks
        self.respawn_at = None
        self.progress.value = time.monotonic()
        # A new housekeeper has this long to connect and extend the leases in hand.
        self.beat_late_at.value = self.progress.value + beat_late_after(self.config.lease_seconds)

        def target() -> int:
            os.close(commands_w)
            os.close(acks_r)
            return Housekeeper(
                self.config,
                worker_id=self.worker_id,
                slots=self.slots,
                wake_fds=self.wake_fds,
                commands_r=commands_r,
                acks_w=acks_w,
                progress=self.progress,
                metrics=self.metrics,
                executors_alive=self.executors_alive,
                last_beat_word=self.last_beat,
                beat_late_word=self.beat_late_at,
            ).run()

        self.pid = fork_child(target)
        self.started = time.monotonic()
        os.close(commands_r)
        os.close(acks_w)
        self.commands = (-1, commands_w)
        self.acks = (acks_r, -1)
        os.set_blocking(commands_w, False)
        # Whatever was not acknowledged goes to the new one (settling twice is harmless).
        for settlement in self.settlements.values():
            self._send(settlement.message())
        if self.finishing():
            self._send(b"stop\n")

    def exited(self, code: int) -> None:
        """The housekeeper process ended (the supervisor reaped it) with ``code``."""
        self.pid = None
        if self.finishing() and code == 0:
            return
        self.deaths += 1
        logger.warning("event=housekeeper_lost code=%d deaths=%d", code, self.deaths)
        delay = housekeeper_respawn_delay(self.deaths)
        self.respawn_at = time.monotonic() + delay

    def watch(self, now: float) -> None:
        self._hold_claims(now > self.beat_late_at.value)
        if self.pid is None:
            if self.respawn_at is not None and now >= self.respawn_at:
                self.spawn()
            return
        health = housekeeper_health(
            now,
            progress=self.progress.value,
            beat_late_at=self.beat_late_at.value,
            started=self.started,
        )
        if health == "stuck":
            logger.warning("event=housekeeper_stuck seconds=%.1f action=restart", now - self.progress.value)
            self._restart(now)
        elif health == "stalled":
            # Its session hangs in a statement (or cannot reach the database): a new
            # housekeeper on a new connection extends the leases before they run out.
            logger.warning(
                "event=housekeeper_stalled late_by=%.1fs action=restart claims=held",
                now - self.beat_late_at.value,
            )
            self._restart(now)
        elif health == "healthy":
            self.deaths = 0

    def _restart(self, now: float) -> None:
        assert self.pid is not None
        self.progress.value = now
        # Until the successor has extended the leases (it moves the word on then).
        self.beat_late_at.value = float("inf")
        send_signal(self.pid, signal.SIGKILL)

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
        for write in self.wake_fds:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(write, b"\0")

    def stop(self, wake_r: int, *, tick: float) -> None:
        """At exit: have what the executors left settled, then the housekeeper stop (for at
        most SETTLE_AT_EXIT). ``wake_r`` is the supervisor's signal wake-up pipe."""
        if self.pid is None and self.respawn_at is not None:
            # Its successor was still to come: what the executors left needs settling.
            self.spawn()
        self._send(b"stop\n")
        deadline = time.monotonic() + SETTLE_AT_EXIT
        while self.pid is not None and time.monotonic() < deadline:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self.read_acks()
                if os.waitstatus_to_exitcode(status) != 0 and self.settlements:
                    self.spawn()
                    self._send(b"stop\n")
                    continue
                self.pid = None
                break
            # Its SIGCHLD wakes this at once (the signal's wake-up pipe), not the next tick:
            # a burst worker exits as soon as its housekeeper does.
            if select.select([wake_r], [], [], tick)[0]:
                os.read(wake_r, 4096)
        self.read_acks()
        if self.pid is not None:
            send_signal(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        if self.settlements:
            logger.error(
                "event=unsettled_at_exit executors=%d reason='database unavailable'", len(self.settlements)
            )

    # --- the channel --------------------------------------------------------------------

    def settle(
        self, token: uuid.UUID, failed: list[Any], reason: str, *, refund_running: bool = False
    ) -> None:
        """Have the housekeeper write what the executor with ``token`` left."""
        self.settlement_seq += 1
        settlement = Settlement(
            seq=self.settlement_seq,
            token=token,
            failed=failed,
            reason=reason,
            refund_running=refund_running,
        )
        self.settlements[settlement.seq] = settlement
        self._send(settlement.message())

    def _send(self, message: bytes) -> None:
        if self.commands is None:
            return
        try:
            os.write(self.commands[1], message)
        except (BlockingIOError, BrokenPipeError, OSError):
            # Resent when the housekeeper is restarted.
            logger.warning("event=housekeeper_unreachable")

    def ack_fds(self) -> list[int]:
        return [self.acks[0]] if self.acks is not None and self.acks[0] >= 0 else []

    def read_acks(self) -> None:
        for fd in self.ack_fds():
            readable, _, _ = select.select([fd], [], [], 0)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            self.ack_buffer += chunk
            *lines, self.ack_buffer = self.ack_buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self.settlements.pop(int(line), None)
