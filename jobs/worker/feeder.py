"""An executor's database thread: it claims work for the executor's lanes, writes their
outcomes and start marks, and gives back what they cannot start soon, all on the
executor's one connection. Lanes (lanes.py) never touch the database; the feeder never
runs a handler. So the database and the handlers work at the same time: while the feeder
waits for the next claim or for an outcome write, the lanes go on running jobs.

This module is the thread and its wait loop: each turn writes what is due, claims if a
claim is due, gives back what cannot start in time, or sleeps until the nearest deadline,
a poke or a wake-up. Wake-ups (an enqueue's NOTIFY) come to the executor's own connection
where it can keep a LISTEN (``listen_in_executors``): heard during the feeder's statements
(psycopg calls ``heard``) and read from the connection's socket while it waits. Else the
housekeeper's relay writes them to the wake pipe. The rest is in pieces that share the
feeder's one lock (a condition variable):

* claimer.py: whether a claim is due, the claim statement, and what its rows mean;
* prefetch.py: how much to claim ahead and for which lane (a pure policy);
* handout.py: the claimed rows handed to the lanes (lane_rows.py), and given back;
* outbox.py: outcomes, start marks and progress reports waiting to be written, and the
  writing of them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
import uuid
from typing import Any

import psycopg

from .. import store
from ..db import Connection
from ..store import Claimed
from .claimer import Claimer
from .config import WorkerConfig
from .fairness import QueueShares
from .handout import Handout
from .joblog import JobLog
from .lane_rows import LaneRows
from .metrics import Publisher
from .outbox import FLUSH_AFTER, FLUSH_COUNT, Outbox
from .outcome import Outcome
from .prefetch import Prefetch

logger = logging.getLogger("jobs.worker")


class Feeder:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        token: uuid.UUID,
        db: Connection,
        lanes: dict[str, LaneRows],
        wake_fd: int | None = None,
        publisher: Publisher | None = None,
        claims_held: Any = None,
        log: JobLog | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.lanes = lanes
        self.wake_fd = wake_fd
        self.shares = QueueShares(config.queues, strict=config.strict)
        self.cv = threading.Condition()
        # How much expected work it claims ahead, and how long rows may wait behind running
        # handlers: at most half the claim lease, within which every row must start.
        self.prefetch = Prefetch(min(config.prefetch_horizon, store.UNSTARTED_LEASE / 2), lanes)
        self.outbox = Outbox(
            self.cv, db=db, token=token, lease_seconds=config.lease_seconds, publisher=publisher, log=log
        )
        self.handout = Handout(
            self.cv,
            lanes=lanes,
            prefetch=self.prefetch,
            shares=self.shares,
            db=db,
            token=token,
            poke=self._poke,
        )
        # The lanes' calls that are the hand-out's alone.
        self.take = self.handout.take
        self.reroute = self.handout.reroute
        self.claimer = Claimer(
            self.cv,
            config=config,
            db=db,
            token=token,
            lanes=lanes,
            shares=self.shares,
            prefetch=self.prefetch,
            handout=self.handout,
            publisher=publisher,
            claims_held=claims_held,
            retire=self._retire_locked,
        )
        self.stopping = False
        self.recycle = False
        self.crashed = False
        self.poke_r, self.poke_w = os.pipe()
        os.set_blocking(self.poke_w, False)
        self.sleeping = False
        # A wake-up came in on the executor's connection during a statement (this thread's).
        self.was_heard = False
        self.thread: threading.Thread | None = None

    @property
    def finished_all(self) -> bool:
        """The thread is done: lanes stop taking rows."""
        return self.handout.finished_all

    # --- called by lanes (any thread) --------------------------------------------------

    def mark_now(self, row: Claimed) -> None:
        """Write this attempt's start (and every finished outcome) before it runs."""
        outbox = self.outbox
        with self.cv:
            outbox.asked += 1
            wanted = outbox.asked
        self._poke()
        with self.cv:
            while outbox.written < wanted and not self.handout.finished_all:
                self.cv.wait(0.5)

    def report_progress(self, key: tuple[uuid.UUID, int], record: dict[str, Any]) -> None:
        """A running attempt's latest progress: written once its interval has passed."""
        now = time.monotonic()
        with self.cv:
            due = self.outbox.report_locked(key, record, now)
        if due:
            self._poke()

    def finished(self, lane: LaneRows, entry: int, outcome: Outcome, duration: float) -> None:
        """An attempt ended: queue its outcome and free its slot."""
        with self.cv:
            row, _ = lane.running.pop(entry)
            waiting = self.outbox.add_locked(row, outcome)
            self.prefetch.finished(row, lane.name, duration)
            poke = waiting == 1 or waiting >= FLUSH_COUNT or not lane.waiting
        if poke:
            self._poke()

    def heard(self, notify: psycopg.Notify) -> None:
        """psycopg's notify handler on the executor's connection (this thread's statements)."""
        self.was_heard = True

    def learn(self, row: Claimed, lane: str) -> None:
        self.prefetch.learn(row, lane)

    def stop(self, *, recycle: bool = False) -> None:
        """Stop claiming, give back what has not started, let running handlers finish."""
        with self.cv:
            self.stopping = True
            self.recycle = self.recycle or recycle
            for lane in self.lanes.values():
                self.handout.give_back_locked(lane, reason="shutdown")
        self._poke()

    def _retire_locked(self) -> None:
        # The executor has started its max_jobs_per_child: no more claims, then a successor.
        self.stopping = self.recycle = True

    def in_hand(self) -> list[str]:
        """Jobs this executor holds (waiting, running, outcome not written yet)."""
        with self.cv:
            return self.outbox.job_ids_locked() + self.handout.job_ids_locked()

    # --- the thread ------------------------------------------------------------------

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="jobs-feeder", daemon=True)
        self.thread.start()

    def run(self) -> None:
        # Signals are for the main thread (the soft time limit must interrupt its handler).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
        try:
            while not self._step():
                pass
        except BaseException:
            self.crashed = True
            logger.exception("event=feeder_crashed")
        finally:
            with self.cv:
                self.handout.finished_all = True
                for lane in self.lanes.values():
                    lane.on_rows()
                self.cv.notify_all()

    def _step(self) -> bool:
        """One turn: write, claim, give back, or wait. True once the executor is done."""
        now = time.monotonic()
        claimer = self.claimer
        with self.cv:
            self.handout.hand_over_held_locked(now)
            self.handout.check_horizon_locked(now)
            releasing, self.handout.to_release = self.handout.to_release, []
            outcomes, started, progressed = self.outbox.due_locked(
                self.lanes.values(), now, stopping=self.stopping
            )
            busy = any(lane.running for lane in self.lanes.values())
            waiting = any(lane.queued for lane in self.lanes.values())
            idle = not busy and not waiting and not self.outbox.pending and not outcomes
            done = idle and (self.stopping or (self.config.burst and claimer.empty_since_write))
            asked = self.outbox.asked
        if releasing:
            self.handout.release(releasing, stopping=self.stopping)
        if outcomes or started or progressed:
            self.outbox.write(outcomes, started, progressed)
            if outcomes:
                claimer.empty_since_write = False
                if self.config.burst or any(o["state"] == "queued" and not o.get("delay") for o in outcomes):
                    # Due again at once (a retry without delay), or a burst worker about to
                    # decide that nothing is left: look now rather than at the next poll.
                    with self.cv:
                        claimer.idle_until = 0.0
        with self.cv:
            if asked > self.outbox.written:
                self.outbox.written = asked
                self.cv.notify_all()
        if done:
            self._flush_everything()
            return True
        if not self.stopping and claimer.claim_if_room(now):
            return False
        if self.config.burst and claimer.empty_since_write:
            # Nothing was due: finish what is in hand, then leave (the next turn decides).
            with self.cv:
                if (
                    not any(lane.running or lane.queued for lane in self.lanes.values())
                    and not self.outbox.pending
                ):
                    return False
        self._wait(now)
        return False

    def _flush_everything(self) -> None:
        with self.cv:
            outcomes = self.outbox.take_all_locked()
        if outcomes:
            self.outbox.write(outcomes, [])

    # --- waiting ---------------------------------------------------------------------------

    def _wait(self, now: float) -> None:
        if self.was_heard:
            self._announced()
            return
        with self.cv:
            timeout = self._next_deadline_locked(now)
            if timeout <= 0:
                return
            self.sleeping = True
        fds = [self.poke_r]
        if self.wake_fd is not None:
            fds.append(self.wake_fd)
        listening = self.db.fileno() if self.config.listen_in_executors else None
        if listening is not None:
            fds.append(listening)
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        finally:
            with self.cv:
                self.sleeping = False
        if self.poke_r in readable:
            os.read(self.poke_r, 4096)
        if listening is not None and listening in readable:
            self._hear()
        if self.wake_fd is not None and self.wake_fd in readable:
            data = os.read(self.wake_fd, 4096)
            if any(byte in (signal.SIGTERM, signal.SIGINT) for byte in data):
                self.stop()
            # A job was announced (or a signal arrived): look again now.
            self._announced()

    def _hear(self) -> None:
        """Read the wake-ups waiting on the executor's connection. One that was closed
        under us (None) is connected again, and LISTENs again, by the claim made now."""
        if self.db.read_notifies() != 0:
            self._announced()

    def _announced(self) -> None:
        """A wake-up, heard or piped: claim at once."""
        self.was_heard = False
        with self.cv:
            self.claimer.idle_until = 0.0

    def _next_deadline_locked(self, now: float) -> float:
        deadlines = self.outbox.deadlines_locked()
        marked = self.outbox.marked
        horizon = self.prefetch.horizon
        claimer = self.claimer
        busy = False
        handed = False
        for lane in self.lanes.values():
            if lane.held and lane.has_room:
                # (A busy lane pokes this thread when its slot frees.)
                deadlines.append(lane.held[0][0])
            if lane.queued:
                deadlines.append(lane.start_by)
            if lane.waiting and not lane.running:
                # Handed to an idle lane that is about to start them (a take does not wake
                # this thread): look again in time to mark the first start.
                handed = True
                deadlines.append(now + FLUSH_AFTER)
            for row, at in lane.running.values():
                busy = True
                if (row.id, row.attempt) not in marked:
                    deadlines.append(at + FLUSH_AFTER)
                if lane.waiting:
                    deadlines.append(at + horizon)
        if claimer.rate_turns and not self.stopping:
            deadlines.append(claimer.rate_turns[0])
        if not self.stopping:
            if now >= claimer.idle_until:
                # Room may open as handlers finish: they poke us then. While they run, the
                # budget is looked at again within the horizon (none: nothing is claimed
                # ahead, and only their pokes matter). Rows just handed over are not room:
                # looking again at once would spin, holding the GIL their lane needs.
                if not busy and not handed:
                    deadlines.append(now)
                elif horizon > 0:
                    deadlines.append(now + horizon)
            else:
                deadlines.append(claimer.idle_until)
        if not deadlines:
            return self.config.poll_interval
        return max(0.0, min(deadlines) - now)

    def _poke(self) -> None:
        if self.sleeping:
            with contextlib.suppress(BlockingIOError):
                os.write(self.poke_w, b"\0")

    def close(self) -> None:
        for fd in (self.poke_r, self.poke_w):
            with contextlib.suppress(OSError):
                os.close(fd)
