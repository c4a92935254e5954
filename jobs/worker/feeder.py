"""An executor's database thread: it claims work for the executor's lanes, writes their
outcomes and start marks, and gives back what they cannot start soon, all on the
executor's one connection. Lanes (lanes.py) never touch the database; the feeder never
runs a handler. So the database and the handlers work at the same time: while the feeder
waits for the next claim or for an outcome write, the lanes go on running jobs.

What it keeps, under one condition variable:

* ``waiting`` per lane: claimed rows not started yet, in the order they should start
  (fairness.py). Only the feeder adds rows; lanes take them one at a time.
* ``running`` per lane: what each lane slot runs, with its start time.
* ``pending``: outcomes of finished attempts, written in one fenced statement when the
  oldest has waited ``FLUSH_AFTER``, when many are waiting, or when the lanes go idle.
* start marks: a running attempt's start is written with the next write (at most about
  ``FLUSH_AFTER`` after it began), or before it begins when the job was handed back
  unstarted before or is a retry (``mark_now``), so that a job that takes its whole worker
  down keeps using attempts instead of looping on refunds.
* ``progress``: the latest progress report of each running attempt (jobs/progress.py),
  written with the next write once ``WRITE_INTERVAL`` has passed since that job's last
  one; the attempt's last report goes with its outcome instead.

Rows an executor holds but has not started are never stuck behind a running handler: when
a lane's handlers have run past the prefetch horizon while rows wait for that lane, or a
task known to be slow starts with rows behind it, the waiting rows are released at once
(attempt given back) for other executors to take; on SIGTERM all of them are. Nor do they
outlive their short claim lease (store.UNSTARTED_LEASE, which no heartbeat extends): rows
not started within half of it go back too, so a row the reaper may take is never started.
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
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import psycopg

from .. import store
from ..db import Connection, is_connection_lost
from ..exceptions import BadReturnValue
from ..progress import WRITE_INTERVAL
from ..store import Claimed
from .config import WorkerConfig
from .fairness import QueueShares
from .metrics import Publisher

logger = logging.getLogger("jobs.worker")

# Outcomes and start marks wait at most about this long in memory before they are written.
FLUSH_AFTER = 0.01
# Or until this many outcomes are waiting.
FLUSH_COUNT = 500
# A running attempt whose start is older than this is marked with the next write (quicker
# ones are usually finished by then, and their outcome says they ran).
MARK_AFTER = 0.002
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
# Weight of the newest duration in a queue's running average.
EWMA = 0.2

INLINE, THREADS, ASYNC = "inline", "threads", "async"


@dataclass
class Lane:
    """Book-keeping for one kind of handler slot; the lane itself is in lanes.py."""

    name: str
    # Slot-table entries of this lane, and how many handlers may run at once.
    entries: list[int]
    waiting: deque[Claimed] = field(default_factory=deque)
    # Rows a rate gave a start time a few ms ahead: (monotonic time, row), in time order;
    # they go to ``waiting`` then.
    held: list[tuple[float, Claimed]] = field(default_factory=list)
    # entry -> (row, monotonic start)
    running: dict[int, tuple[Claimed, float]] = field(default_factory=dict)
    # The rows in hand must have started by then (monotonic), or go back: the earliest of
    # their claims' deadlines (half their short lease before a start, store.UNSTARTED_LEASE).
    start_by: float = float("inf")
    # Called (with the feeder's lock held) when rows were added or the lane must stop.
    on_rows: Callable[[], None] = lambda: None

    @property
    def free(self) -> int:
        return len(self.entries) - len(self.running) - len(self.waiting) - len(self.held)

    @property
    def has_room(self) -> bool:
        """A slot is free for a row to start in at once."""
        return len(self.running) + len(self.waiting) < len(self.entries)

    @property
    def queued(self) -> bool:
        """Rows in hand that have not started (waiting, or held for their start time)."""
        return bool(self.waiting or self.held)


class Feeder:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        token: uuid.UUID,
        db: Connection,
        lanes: dict[str, Lane],
        wake_fd: int | None = None,
        publisher: Publisher | None = None,
        claims_held: Any = None,
    ) -> None:
        self.config = config
        # The supervisor's word: nonzero while leases cannot be extended (no claims then).
        self.claims_held = claims_held
        # How much expected work it claims ahead, and how long rows may wait behind running
        # handlers: at most half the claim lease, within which every row must start.
        self.horizon = min(config.prefetch_horizon, store.UNSTARTED_LEASE / 2)
        self.token = token
        # The executor's metrics, published after each write of outcomes (None: off).
        self.publisher = publisher
        self.db = db
        self.lanes = lanes
        self.wake_fd = wake_fd
        self.shares = QueueShares(config.queues, strict=config.strict)
        self.cv = threading.Condition()
        self.pending: list[dict[str, Any]] = []
        self.pending_since = 0.0
        # Being written right now (kept for the orphan release on reconnect).
        self.writing: list[dict[str, Any]] = []
        # (id, attempt) of running attempts whose start is written.
        self.marked: set[tuple[uuid.UUID, int]] = set()
        # (id, attempt) -> latest progress report not written yet, and when each running
        # attempt's progress was last written (monotonic).
        self.progress: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        self.progress_written: dict[tuple[uuid.UUID, int], float] = {}
        # Rows taken from the lanes to be given back.
        self.to_release: list[uuid.UUID] = []
        # Sync flushes: lanes wait until written >= the generation they asked for.
        self.asked = 0
        self.written = 0
        self.stopping = False
        self.recycle = False
        self.finished_all = False
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
        self.started_jobs = 0
        # Per queue: expected run time of an inline job, and the lane its jobs went to.
        self.expected: dict[str, float] = {}
        self.lane_of_queue: dict[str, str] = {}
        # Per task: the lane it runs in (learned when a lane first resolves it) and its
        # expected run time.
        self.lane_of_task: dict[str, str] = {}
        self.task_time: dict[str, float] = {}
        self.poke_r, self.poke_w = os.pipe()
        os.set_blocking(self.poke_w, False)
        self.sleeping = False
        self.thread: threading.Thread | None = None

    # --- called by lanes (any thread) --------------------------------------------------

    def take(self, lane: Lane, entry: int, *, block: bool = True) -> tuple[Claimed, float] | None:
        """The next row for ``lane``, started in lane slot ``entry`` now (returns the row
        and the start time), or None when the executor stops (or, without ``block``, when
        nothing waits). The caller writes its slot entry before anything of it runs."""
        with self.cv:
            while True:
                while not lane.waiting:
                    if self.finished_all or not block:
                        return None
                    self.cv.wait()
                at = time.monotonic()
                if at <= lane.start_by:
                    break
                # Their claim's short lease is half gone: they go back, and the next claim
                # brings fresh ones.
                self._give_back_locked(lane, reason="claim_lease")
                self._poke()
            row = lane.waiting.popleft()
            if not lane.waiting and not lane.held:
                lane.start_by = float("inf")
            lane.running[entry] = (row, at)
            self.started_jobs += 1
            slow = lane.waiting and self.task_time.get(row.task_path, 0.0) > self.horizon
            if slow and lane.name == INLINE:
                # A task known to outlast the horizon: what waits behind it goes now.
                self._give_back_locked(lane, reason="behind_slow_task")
        if slow:
            self._poke()
        return row, at

    def mark_now(self, row: Claimed) -> None:
        """Write this attempt's start (and every finished outcome) before it runs."""
        with self.cv:
            self.asked += 1
            wanted = self.asked
        self._poke()
        with self.cv:
            while self.written < wanted and not self.finished_all:
                self.cv.wait(0.5)

    def report_progress(self, key: tuple[uuid.UUID, int], record: dict[str, Any]) -> None:
        """A running attempt's latest progress: written once its interval has passed."""
        now = time.monotonic()
        with self.cv:
            self.progress[key] = record
            due = now >= self.progress_written.get(key, 0.0) + WRITE_INTERVAL
        if due:
            self._poke()

    def finished(self, lane: Lane, entry: int, outcome: dict[str, Any], duration: float) -> None:
        """An attempt ended: queue its outcome and free its slot."""
        with self.cv:
            row, _ = lane.running.pop(entry)
            if self.marked:
                self.marked.discard((row.id, row.attempt))
            if self.progress or self.progress_written:
                # Its last report goes with the outcome.
                self.progress.pop((row.id, row.attempt), None)
                self.progress_written.pop((row.id, row.attempt), None)
            if not self.pending:
                self.pending_since = time.monotonic()
            self.pending.append(outcome)
            previous_task = self.task_time.get(row.task_path)
            if previous_task is None:
                # A task's first job pays for importing it: not a measure of the next ones.
                self.task_time[row.task_path] = duration / 10
            else:
                self.task_time[row.task_path] = previous_task + EWMA * (duration - previous_task)
                if lane.name == INLINE:
                    previous = self.expected.get(row.queue_name)
                    self.expected[row.queue_name] = (
                        duration if previous is None else previous + EWMA * (duration - previous)
                    )
            poke = len(self.pending) == 1 or len(self.pending) >= FLUSH_COUNT or not lane.waiting
        if poke:
            self._poke()

    def reroute(self, lane: Lane, entry: int, row: Claimed, to: str) -> None:
        """A lane resolved the row's task and found it belongs to lane ``to`` (an async
        task met by the inline lane): it starts there next, ahead of that lane's queue."""
        with self.cv:
            lane.running.pop(entry, None)
            self.started_jobs -= 1
            self.lane_of_task[row.task_path] = to
            self.lane_of_queue[row.queue_name] = to
            target = self.lanes[to]
            target.waiting.appendleft(row)
            target.on_rows()
            self.cv.notify_all()

    def learn(self, row: Claimed, lane: str) -> None:
        self.lane_of_task[row.task_path] = lane
        self.lane_of_queue[row.queue_name] = lane

    def stop(self, *, recycle: bool = False) -> None:
        """Stop claiming, give back what has not started, let running handlers finish."""
        with self.cv:
            self.stopping = True
            self.recycle = self.recycle or recycle
            for lane in self.lanes.values():
                self._give_back_locked(lane, reason="shutdown")
        self._poke()

    def in_hand(self) -> list[str]:
        """Jobs this executor holds (waiting, running, outcome not written yet)."""
        with self.cv:
            ids = [str(o["id"]) for o in (*self.writing, *self.pending)]
            for lane in self.lanes.values():
                ids.extend(str(row.id) for row in lane.waiting)
                ids.extend(str(row.id) for _, row in lane.held)
                ids.extend(str(row.id) for row, _ in lane.running.values())
            return ids

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
                self.finished_all = True
                for lane in self.lanes.values():
                    lane.on_rows()
                self.cv.notify_all()

    def _step(self) -> bool:
        """One turn: write, claim, give back, or wait. True once the executor is done."""
        now = time.monotonic()
        with self.cv:
            self._hand_over_held_locked(now)
            self._check_horizon_locked(now)
            releasing, self.to_release = self.to_release, []
            outcomes, started, progressed = self._due_writes_locked(now)
            busy = any(lane.running for lane in self.lanes.values())
            waiting = any(lane.queued for lane in self.lanes.values())
            idle = not busy and not waiting and not self.pending and not outcomes
            done = idle and (self.stopping or (self.config.burst and self.empty_since_write))
            asked = self.asked
        if releasing:
            self._release(releasing)
        if outcomes or started or progressed:
            self._write(outcomes, started, progressed)
            if outcomes:
                self.empty_since_write = False
                if self.config.burst or any(o["state"] == "queued" and not o.get("delay") for o in outcomes):
                    # Due again at once (a retry without delay), or a burst worker about to
                    # decide that nothing is left: look now rather than at the next poll.
                    with self.cv:
                        self.idle_until = 0.0
        with self.cv:
            if asked > self.written:
                self.written = asked
                self.cv.notify_all()
        if done:
            self._flush_everything()
            return True
        if self._claim_if_room(now):
            return False
        if self.config.burst and self.empty_since_write:
            # Nothing was due: finish what is in hand, then leave (the next turn decides).
            with self.cv:
                if not any(lane.running or lane.queued for lane in self.lanes.values()) and not self.pending:
                    return False
        self._wait(now)
        return False

    # --- writing -----------------------------------------------------------------------

    def _due_writes_locked(
        self, now: float
    ) -> tuple[list[dict[str, Any]], list[tuple[uuid.UUID, int]], list[dict[str, Any]]]:
        idle = not any(lane.running or lane.queued for lane in self.lanes.values())
        urgent = self.asked > self.written
        due = self.pending and (
            urgent
            or idle
            or self.stopping
            or len(self.pending) >= FLUSH_COUNT
            or now - self.pending_since >= FLUSH_AFTER
        )
        started = []
        for lane in self.lanes.values():
            for row, at in lane.running.values():
                key = (row.id, row.attempt)
                if key not in self.marked and (urgent or now - at >= MARK_AFTER):
                    started.append(key)
        progressed = self._due_progress_locked(now) if self.progress else []
        marks_due = started and (urgent or self._oldest_unmarked(now) >= FLUSH_AFTER)
        if not due and not progressed and not marks_due:
            return [], [], []
        outcomes, self.pending = (self.pending, []) if due or self.pending else ([], [])
        self.writing = outcomes
        self.marked.update(started)
        return outcomes, started, progressed

    def _due_progress_locked(self, now: float) -> list[dict[str, Any]]:
        due = []
        for key, record in list(self.progress.items()):
            if now >= self.progress_written.get(key, 0.0) + WRITE_INTERVAL:
                del self.progress[key]
                self.progress_written[key] = now
                due.append({"id": key[0], "attempt": key[1], "progress": record})
        return due

    def _oldest_unmarked(self, now: float) -> float:
        oldest = 0.0
        for lane in self.lanes.values():
            for row, at in lane.running.values():
                if (row.id, row.attempt) not in self.marked:
                    oldest = max(oldest, now - at)
        return oldest

    def _write(
        self,
        outcomes: list[dict[str, Any]],
        started: list[tuple[uuid.UUID, int]],
        progressed: Sequence[dict[str, Any]] = (),
    ) -> None:
        try:
            changed = self._record(outcomes, started, progressed)
        except BaseException:
            with self.cv:
                self.pending[:0] = outcomes
                self.marked.difference_update(started)
                for item in progressed:
                    # Unless a newer report came meanwhile.
                    self.progress.setdefault((item["id"], item["attempt"]), item["progress"])
                self.writing = []
            raise
        with self.cv:
            self.writing = []
        dropped = []
        if len(changed) != len(outcomes):
            for outcome in outcomes:
                if _as_uuid(outcome["id"]) not in changed:
                    dropped.append(_as_uuid(outcome["id"]))
                    logger.warning(
                        "event=outcome_dropped job=%s attempt=%s reason=claim_superseded",
                        outcome["id"],
                        outcome["attempt"],
                    )
        if self.publisher is not None and outcomes:
            if dropped:
                self._count_cancelled(dropped)
            self.publisher.publish()

    def _count_cancelled(self, ids: list[uuid.UUID]) -> None:
        """Count the dropped outcomes whose job was cancelled while it ran (the others lost
        their lease: the reaper that took them back counted them)."""
        assert self.publisher is not None
        try:
            cancelled = self.db.run(partial(_cancelled_among, ids=ids))
        except psycopg.Error as exc:
            if is_connection_lost(exc):
                raise
            logger.warning("event=metrics_read_failed error=%r", str(exc).strip())
            return
        for task, queue in cancelled:
            self.publisher.tally.count(task, queue, "cancelled")

    def _record(
        self,
        outcomes: list[dict[str, Any]],
        started: list[tuple[uuid.UUID, int]],
        progressed: Sequence[dict[str, Any]] = (),
    ) -> set[uuid.UUID]:
        def write(
            cursor: Any,
            batch: list[dict[str, Any]],
            marks: list[tuple[uuid.UUID, int]],
            progress: Sequence[dict[str, Any]] = (),
        ) -> set[uuid.UUID]:
            return store.record_outcomes(
                cursor,
                worker=self.token,
                outcomes=batch,
                started=marks,
                progress=progress,
                lease_seconds=self.config.lease_seconds,
                prepare=True,
            )

        try:
            return self.db.run(partial(write, batch=outcomes, marks=started, progress=progressed))
        except psycopg.Error as exc:
            if is_connection_lost(exc):
                raise
            failure = exc
        # The database refused the batch for what one outcome holds. Retried as is, it
        # would fail forever and take the executor down with every job in hand: write
        # them one by one, and an outcome that cannot be written at all as a dead job.
        logger.warning("event=outcome_batch_refused count=%d error=%r", len(outcomes), str(failure).strip())
        changed: set[uuid.UUID] = set()
        self.db.run(partial(write, batch=[], marks=started, progress=progressed))
        for outcome in outcomes:
            try:
                changed |= self.db.run(partial(write, batch=[outcome], marks=[]))
            except psycopg.Error as exc:
                if is_connection_lost(exc):
                    raise
                changed |= self.db.run(partial(write, batch=[_unstorable(outcome, exc)], marks=[]))
        return changed

    def _flush_everything(self) -> None:
        with self.cv:
            outcomes, self.pending = self.pending, []
            self.writing = outcomes
        if outcomes:
            self._write(outcomes, [])

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
            if self.config.max_jobs_per_child and self.started_jobs >= self.config.max_jobs_per_child:
                self.stopping = self.recycle = True
                return False
            budget = self._budget_locked(now)
            if not budget:
                return False
        limit = self.config.max_batch
        quotas = self.shares.quotas(limit=limit, spend=partial(self._spend, dict(budget)))
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
        self._distribute(runnable, claimed_at, asked_at)
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

    def _budget_locked(self, now: float) -> dict[Any, float]:
        """How much each lane can take now: seconds of expected work for the inline lane
        (topped up to the horizon once half of it is used), free slots for the others."""
        budget: dict[Any, float] = {}
        horizon = self.horizon
        inline = self.lanes.get(INLINE)
        if inline is not None and not self._stuck(inline, now):
            ahead = sum(self._expected(row.queue_name) for row in inline.waiting)
            ahead += sum(self._expected(row.queue_name) for _, row in inline.held)
            for row, at in inline.running.values():
                ahead += max(self._expected(row.queue_name) - (now - at), 0.0)
            if not inline.waiting and not inline.running:
                # An idle handler takes a job whatever the horizon (0: nothing claimed
                # ahead, one job at a time): _spend lets a job overrun what is left.
                budget[INLINE] = max(horizon, 1e-9)
            elif ahead < horizon / 2:
                budget[INLINE] = horizon - ahead
        for name in (THREADS, ASYNC):
            lane = self.lanes.get(name)
            if lane is not None and lane.free > 0:
                budget[name] = float(lane.free)
        return budget

    def _stuck(self, lane: Lane, now: float) -> bool:
        """Every slot of the lane runs a handler that has outlived the horizon: rows given
        to it would only wait (and be given back)."""
        horizon = self.horizon
        return len(lane.running) >= len(lane.entries) and all(
            now - at > horizon for _, at in lane.running.values()
        )

    def _expected(self, queue: str) -> float:
        expected = self.expected.get(queue)
        return self.horizon if expected is None else expected

    def _spend(self, budget: dict[Any, float], queue: str) -> bool:
        """Take one job of ``queue`` out of the claim's budget, if there is any left for the
        lane its jobs go to (a job may overrun what is left: it is still worth starting)."""
        lane = self._lane_for_queue(queue)
        left = budget.get(lane, 0.0)
        if left <= 0:
            return False
        if lane != INLINE:
            budget[lane] = left - 1
            return True
        expected = self.expected.get(queue)
        if expected is None:
            # Not measured yet: one job of this queue per claim until it is.
            if budget.get(("once", queue)):
                return False
            budget[("once", queue)] = 1
            return True
        budget[INLINE] = left - max(expected, 1e-6)
        return True

    def _lane_for_queue(self, queue: str) -> str:
        lane = self.lane_of_queue.get(queue)
        if lane is None or lane not in self.lanes:
            return THREADS if THREADS in self.lanes else INLINE
        return lane

    def _lane_for_task(self, task_path: str) -> str:
        lane = self.lane_of_task.get(task_path)
        if lane is None or lane not in self.lanes:
            # Unknown tasks start where a blocking one would: resolving one may import code.
            return THREADS if THREADS in self.lanes else INLINE
        return lane

    def _distribute(self, rows: list[Claimed], claimed_at: float, asked_at: float) -> None:
        """Hand claimed rows to their lanes. ``asked_at``: when the claim was sent (its
        leases count from then at the latest), ``claimed_at``: when its reply came."""
        if not rows:
            return
        # Within a queue: priority first, then run_at, then id (FIFO among equals). Across
        # queues: the fair interleaving of fairness.py.
        rows = sorted(rows, key=lambda row: (row.queue_name, -row.priority, row.run_at, row.id))
        if rows[0].queue_name == rows[-1].queue_name:
            # One queue (the commonest batch): nothing to interleave.
            ordered = rows
        else:
            position: dict[str, int] = {}
            keyed = []
            for row in rows:
                index = position.get(row.queue_name, 0)
                position[row.queue_name] = index + 1
                keyed.append((row.queue_name, index))
            ordered = [rows[i] for i in self.shares.order(keyed)]
        # Each started within half its claim lease, or given back (the reaper may take it
        # once the lease is over).
        start_by = asked_at + min(store.UNSTARTED_LEASE, *(row.lease_seconds for row in rows)) / 2
        with self.cv:
            touched = set()
            for row in ordered:
                lane = self.lanes[self._lane_for_task(row.task_path)]
                if start_by < lane.start_by:
                    lane.start_by = start_by
                if row.start_in is not None:
                    # A rate gave it a start time (now, or a few ms ahead): it waits here
                    # until then, spaced from the ones before it.
                    lane.held.append((claimed_at + row.start_in, row))
                    lane.held.sort(key=lambda held: held[0])
                    continue
                lane.waiting.append(row)
                touched.add(lane.name)
            if any(lane.held for lane in self.lanes.values()):
                self._hand_over_held_locked(time.monotonic())
            for name in touched:
                self.lanes[name].on_rows()
            self.cv.notify_all()

    def _hand_over_held_locked(self, now: float) -> None:
        """Rows held for their start time go to their lane when it has come and a slot of
        the lane is free. One handed over late (its lane was busy, or this thread) moves the
        rest back as much, so they keep their spacing: a late turn never starts several at
        once (which a rate's window would count)."""
        for lane in self.lanes.values():
            if not lane.held or lane.held[0][0] > now or not lane.has_room:
                continue
            while lane.held and lane.held[0][0] <= now and lane.has_room:
                at, row = lane.held.pop(0)
                lane.waiting.append(row)
                late = now - at
                if late > 0.001:
                    lane.held = [(when + late, held) for when, held in lane.held]
            lane.on_rows()
            self.cv.notify_all()

    # --- giving back ---------------------------------------------------------------------

    def _check_horizon_locked(self, now: float) -> None:
        for lane in self.lanes.values():
            # Every slot of the lane runs a handler past the horizon: what waits for it
            # would wait longer than that.
            if lane.waiting and self._stuck(lane, now):
                self._give_back_locked(lane, reason="behind_running_handler")
            elif now > lane.start_by and lane.queued:
                self._give_back_locked(lane, reason="claim_lease")

    def _give_back_locked(self, lane: Lane, *, reason: str) -> None:
        if not lane.queued:
            return
        ids = [row.id for row in lane.waiting] + [row.id for _, row in lane.held]
        lane.waiting.clear()
        lane.held.clear()
        lane.start_by = float("inf")
        self.to_release.extend(ids)
        logger.debug("event=giving_back count=%d lane=%s reason=%s", len(ids), lane.name, reason)

    def _release(self, ids: list[uuid.UUID]) -> None:
        try:
            released = self.db.run(partial(_release, worker=self.token, ids=ids))
        except psycopg.Error as exc:
            if is_connection_lost(exc):
                raise
            # Their leases run out and the reaper gives them back unused, as unstarted.
            logger.warning("event=release_failed count=%d error=%r", len(ids), str(exc).strip())
            return
        if released:
            # At shutdown, one of the lines that say what the worker did with its jobs; at
            # other times routine (rows that would have waited behind a slow handler).
            logger.log(
                logging.INFO if self.stopping else logging.DEBUG,
                "event=handed_back jobs=%d reason=%s",
                len(released),
                "shutdown" if self.stopping else "behind_running_handler",
            )

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
        deadlines = []
        if self.pending:
            deadlines.append(self.pending_since + FLUSH_AFTER)
        if self.progress:
            deadlines.append(
                min(self.progress_written.get(key, 0.0) for key in self.progress) + WRITE_INTERVAL
            )
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
                if (row.id, row.attempt) not in self.marked:
                    deadlines.append(at + FLUSH_AFTER)
                if lane.waiting:
                    deadlines.append(at + self.horizon)
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
                elif self.horizon > 0:
                    deadlines.append(now + self.horizon)
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


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def _cancelled_among(cursor: Any, *, ids: list[uuid.UUID]) -> list[tuple[str, str]]:
    return store.cancelled_among(cursor, ids)


def _release(cursor: Any, *, worker: uuid.UUID, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return store.release(cursor, worker=worker, ids=ids)


def _unstorable(outcome: dict[str, Any], exc: Exception) -> dict[str, Any]:
    message = f"the outcome of this attempt cannot be stored: {str(exc).strip()}"
    return {
        "id": outcome["id"],
        "attempt": outcome["attempt"],
        "in_workflow": outcome.get("in_workflow", True),
        "state": "dead",
        "error": {
            "exception": f"{BadReturnValue.__module__}.{BadReturnValue.__qualname__}",
            "message": message,
            "traceback": "",
        },
    }
