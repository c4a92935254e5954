"""An executor's database thread: it claims work for the executor's lanes, writes their
outcomes and start marks, and gives back what they cannot start soon, all on the
executor's one connection. Lanes (lanes.py) never touch the database; the feeder never
runs a handler. So the database and the handlers work at the same time: while the feeder
waits for the next claim or for an outcome write, the lanes go on running jobs.

This module is the thread, its wait loop and the claim; the rest is in pieces that share
the feeder's one lock (a condition variable):

* prefetch.py: how much to claim ahead and for which lane (a pure policy);
* handout.py: the claimed rows handed to the lanes (lane_rows.py), and given back;
* outbox.py: outcomes, start marks and progress reports waiting to be written, and the
  writing of them.

The claim stays here with the loop (past ~400 lines together): when to claim next (the
rechecks, a rate's turn, the supervisor's hold, burst mode's end) is the loop's own state.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import select
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

import psycopg

from .. import store
from ..db import Connection, is_connection_lost
from ..store import Claimed
from .config import WorkerConfig
from .fairness import QueueShares
from .handout import Handout
from .lane_rows import LaneRows
from .metrics import Publisher
from .outbox import FLUSH_AFTER, FLUSH_COUNT, Outbox
from .outcome import Outcome
from .prefetch import Prefetch

logger = logging.getLogger("jobs.worker")

# After a claim that found nothing, the next one waits for a wake-up or the poll interval;
# after a failed statement, this long.
RETRY_AFTER = 1.0
# While the supervisor holds the claims, they are looked at again this often.
HELD_RECHECK = 0.1
# After a claim that found jobs, claims that find nothing are followed by one more this
# soon, then one more this soon, before the executor waits for a wake-up or the poll: a job
# enqueued alone while its queue had a due job sends no wake-up (insert_one.sql), and may
# commit just after the claim that took that job. Most commit within a few milliseconds;
# the second look covers a slow commit. (Too late a first look let one late job hold back
# every job enqueued behind it, none of them sending a wake-up: 50 ms stalls at 50 jobs/s.)
RECHECKS = (0.005, 0.05)
# While limits are declared, whether any still is is read again after this long (seconds).
LIMITS_READ_EVERY = 30.0


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
    ) -> None:
        self.config = config
        # The supervisor's word: nonzero while leases cannot be extended (no claims then).
        self.claims_held = claims_held
        self.token = token
        # The executor's metrics, published after claims that did not start every row.
        self.publisher = publisher
        self.db = db
        self.lanes = lanes
        self.wake_fd = wake_fd
        self.shares = QueueShares(config.queues, strict=config.strict)
        self.cv = threading.Condition()
        # How much expected work it claims ahead, and how long rows may wait behind running
        # handlers: at most half the claim lease, within which every row must start.
        self.prefetch = Prefetch(min(config.prefetch_horizon, store.UNSTARTED_LEASE / 2), lanes)
        self.outbox = Outbox(
            self.cv, db=db, token=token, lease_seconds=config.lease_seconds, publisher=publisher
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
        self.stopping = False
        self.recycle = False
        self.idle_until = 0.0
        # When the jobs a rate kept waiting come back (monotonic, a heap): this executor
        # promotes and claims then, rather than wait for housekeeping and a NOTIFY.
        self.rate_turns: list[float] = []
        # How many of the RECHECKS have been made since the last claim that found jobs.
        self.rechecked = len(RECHECKS)
        # Whether a rate or concurrency limit is declared: without one, the cheaper claim
        # statement serves (and says so when one is). Read again now and then while true
        # (monotonic time of the last read), to go back once none is.
        self.limits = False
        self.limits_read_at = 0.0
        # Burst mode ends once a claim made after the last write found nothing.
        self.empty_since_write = False
        self.crashed = False
        self.poke_r, self.poke_w = os.pipe()
        os.set_blocking(self.poke_w, False)
        self.sleeping = False
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
            done = idle and (self.stopping or (self.config.burst and self.empty_since_write))
            asked = self.outbox.asked
        if releasing:
            self.handout.release(releasing, stopping=self.stopping)
        if outcomes or started or progressed:
            self.outbox.write(outcomes, started, progressed)
            if outcomes:
                self.empty_since_write = False
                if self.config.burst or any(o["state"] == "queued" and not o.get("delay") for o in outcomes):
                    # Due again at once (a retry without delay), or a burst worker about to
                    # decide that nothing is left: look now rather than at the next poll.
                    with self.cv:
                        self.idle_until = 0.0
        with self.cv:
            if asked > self.outbox.written:
                self.outbox.written = asked
                self.cv.notify_all()
        if done:
            self._flush_everything()
            return True
        if self._claim_if_room(now):
            return False
        if self.config.burst and self.empty_since_write:
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

    # --- claiming ----------------------------------------------------------------------

    def _claim_if_room(self, now: float) -> bool:
        """Claim if some lane has room and the last claim did not come back empty just now.
        True if it claimed anything."""
        with self.cv:
            turn = bool(self.rate_turns) and now >= self.rate_turns[0]
            if self.stopping or (now < self.idle_until and not turn):
                return False
            if self.claims_held is not None and self.claims_held.value:
                # Looked at again soon; the supervisor's wake-up ends the wait sooner.
                self.idle_until = now + HELD_RECHECK
                return False
            while self.rate_turns and self.rate_turns[0] <= now:
                heapq.heappop(self.rate_turns)
            if self.config.max_jobs_per_child and self.handout.started_jobs >= self.config.max_jobs_per_child:
                self.stopping = self.recycle = True
                return False
            budget = self.prefetch.budget(self.lanes, now)
            if not budget:
                return False
        limit = self.config.max_batch
        quotas = self.shares.quotas(limit=limit, spend=partial(self.prefetch.spend, dict(budget)))
        total = self.shares.batch_size(quotas, limit)
        if not total:
            # Room only in a lane none of the queues' jobs go to.
            return False
        asked_at = time.monotonic()
        try:
            rows = self.db.run(partial(self._claim, quotas=quotas, limit=total, promote=turn))
            # Start times under a rate count from the statement's start on the database's
            # clock; counted from its end here they can be late, never early.
            claimed_at = time.monotonic()
        except psycopg.Error as exc:
            if is_connection_lost(exc):
                raise
            logger.warning("event=claim_failed error=%r", str(exc).strip())
            with self.cv:
                self.idle_until = time.monotonic() + RETRY_AFTER
            return False
        got: dict[str, int] = {}
        runnable = []
        for row in rows:
            got[row.queue_name] = got.get(row.queue_name, 0) + 1
            if row.decision == "start":
                runnable.append(row)
            elif row.expired:
                if self.publisher is not None:
                    self.publisher.tally.count(row.task_path, row.queue_name, "expired")
                logger.info(
                    "event=job_expired job=%s task=%s queue=%s trace_id=%s outcome=expired",
                    row.id,
                    row.task_path,
                    row.queue_name,
                    row.trace_id,
                )
            else:
                # A rate or concurrency limit keeps it waiting (no attempt used).
                if row.start_in is not None:
                    with self.cv:
                        heapq.heappush(self.rate_turns, claimed_at + row.start_in)
                logger.debug("event=job_limited job=%s task=%s wait=%s", row.id, row.task_path, row.decision)
        self.handout.distribute(runnable, claimed_at, asked_at)
        self.shares.took(quotas, got)
        # Nothing due means nothing due only if every queue was asked; otherwise the next
        # claim asks the others (the ones that came back short are dry now).
        if self.publisher is not None and len(runnable) != len(rows):
            self.publisher.publish()
        if not rows and all(quotas):
            with self.cv:
                self.empty_since_write = True
                # Soon after a claim that found jobs, look again (RECHECKS): a job committed
                # just after that claim may have sent no wake-up (enqueue notifies only a
                # queue's first due job, and the job just claimed was still due then).
                self.idle_until = time.monotonic() + self._next_look()
        elif rows and _came_back_short(self.shares.names, quotas, total, got):
            # Every queue asked had fewer due jobs than it was asked for: another claim now
            # would find nothing, and its statement would take a core from the handler just
            # handed its job. One look soon instead, as after a claim that found nothing
            # (for a job committed while this claim ran), then the poll interval.
            self.rechecked = 0
            with self.cv:
                self.idle_until = time.monotonic() + self._next_look()
            return True
        if rows:
            self.rechecked = 0
        return bool(rows) or not all(quotas)

    def _next_look(self) -> float:
        """Seconds until the next claim after one that found nothing new: the next of the
        RECHECKS since the last claim that found jobs, then the poll interval."""
        if self.rechecked >= len(RECHECKS):
            return self.config.poll_interval
        self.rechecked += 1
        return min(RECHECKS[self.rechecked - 1], self.config.poll_interval)

    def _claim(self, cursor: Any, *, quotas: list[int], limit: int, promote: bool = False) -> list[Claimed]:
        if promote:
            store.promote(cursor)
        now = time.monotonic()
        if self.limits and now >= self.limits_read_at + LIMITS_READ_EVERY:
            self.limits = store.limits_declared(cursor)
            self.limits_read_at = now
        claim = partial(
            store.claim,
            cursor,
            worker=self.token,
            queues=self.shares.names,
            lease_seconds=self.config.lease_seconds,
            default_timeout=self.config.default_timeout or None,
            prepare=True,
        )
        rows = claim(quotas=quotas, limit=limit, limits=self.limits)
        if rows and rows[-1].decision == store.LIMITS_DECLARED:
            # A limit was declared since: its jobs were passed over. They, and the rest of
            # the batch, are claimed under the limits now.
            rows.pop()
            self.limits, self.limits_read_at = True, now
            taken = Counter(row.queue_name for row in rows)
            names = self.shares.names
            rest = [max(0, quota - taken[name]) for name, quota in zip(names, quotas, strict=True)]
            if limit > len(rows) and any(rest):
                rows += claim(quotas=rest, limit=limit - len(rows), limits=True)
        return rows

    # --- waiting ---------------------------------------------------------------------------

    def _wait(self, now: float) -> None:
        with self.cv:
            timeout = self._next_deadline_locked(now)
            if timeout <= 0:
                return
            self.sleeping = True
        fds = [self.poke_r]
        if self.wake_fd is not None:
            fds.append(self.wake_fd)
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        finally:
            with self.cv:
                self.sleeping = False
        if self.poke_r in readable:
            os.read(self.poke_r, 4096)
        if self.wake_fd is not None and self.wake_fd in readable:
            data = os.read(self.wake_fd, 4096)
            if any(byte in (signal.SIGTERM, signal.SIGINT) for byte in data):
                self.stop()
            with self.cv:
                # A job was announced (or a signal arrived): look again now.
                self.idle_until = 0.0

    def _next_deadline_locked(self, now: float) -> float:
        deadlines = self.outbox.deadlines_locked()
        marked = self.outbox.marked
        horizon = self.prefetch.horizon
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
        if self.rate_turns and not self.stopping:
            deadlines.append(self.rate_turns[0])
        if not self.stopping:
            if now >= self.idle_until:
                # Room may open as handlers finish: they poke us then. While they run, the
                # budget is looked at again within the horizon (none: nothing is claimed
                # ahead, and only their pokes matter). Rows just handed over are not room:
                # looking again at once would spin, holding the GIL their lane needs.
                if not busy and not handed:
                    deadlines.append(now)
                elif horizon > 0:
                    deadlines.append(now + horizon)
            else:
                deadlines.append(self.idle_until)
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


def _came_back_short(names: Sequence[str], quotas: Sequence[int], total: int, got: dict[str, int]) -> bool:
    """Whether a claim found fewer rows than asked for in every queue it asked (and in
    all): nothing more was due in any of them."""
    asked = [(name, quota) for name, quota in zip(names, quotas, strict=True) if quota]
    return sum(got.values()) < total and all(got.get(name, 0) < quota for name, quota in asked)
