"""The hand-out of claimed rows to an executor's lanes, and their give-back.

Rows an executor holds but has not started are never stuck behind a running handler: when
a lane's handlers have run past the prefetch horizon while rows wait for that lane, or a
task known to be slow starts with rows behind it, the waiting rows are released at once
(attempt given back) for other executors to take; on SIGTERM all of them are. Nor do they
outlive their short claim lease (store.UNSTARTED_LEASE, which no heartbeat extends): rows
not started within half of it go back too, so a row the reaper may take is never started.

The state is guarded by the feeder's lock (``cv``): methods whose name ends in ``_locked``
are called with it held; ``take`` and ``reroute`` (the lanes') and ``distribute`` take it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg

from .. import store
from ..db import Connection, is_connection_lost
from ..store import Claimed
from .fairness import QueueShares
from .lane_rows import INLINE, LaneRows
from .prefetch import Prefetch

logger = logging.getLogger("jobs.worker")


class Handout:
    def __init__(
        self,
        cv: threading.Condition,
        *,
        lanes: dict[str, LaneRows],
        prefetch: Prefetch,
        shares: QueueShares,
        db: Connection,
        token: uuid.UUID,
        poke: Callable[[], None],
    ) -> None:
        self.cv = cv
        self.lanes = lanes
        self.prefetch = prefetch
        self.shares = shares
        self.db = db
        self.token = token
        # Wakes the feeder's thread (it releases what was given back).
        self.poke = poke
        # Rows taken from the lanes to be given back.
        self.to_release: list[uuid.UUID] = []
        self.started_jobs = 0
        # Set when the feeder is done: lanes stop taking rows.
        self.finished_all = False

    # --- the lanes' side -----------------------------------------------------------------

    def take(self, lane: LaneRows, entry: int, *, block: bool = True) -> tuple[Claimed, float] | None:
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
                self.give_back_locked(lane, reason="claim_lease")
                self.poke()
            row = lane.waiting.popleft()
            if not lane.waiting and not lane.held:
                lane.start_by = float("inf")
            lane.running[entry] = (row, at)
            self.started_jobs += 1
            slow = lane.waiting and self.prefetch.slow(row.task_path)
            if slow and lane.name == INLINE:
                # A task known to outlast the horizon: what waits behind it goes now.
                self.give_back_locked(lane, reason="behind_slow_task")
        if slow:
            self.poke()
        return row, at

    def reroute(self, lane: LaneRows, entry: int, row: Claimed, to: str) -> None:
        """A lane resolved the row's task and found it belongs to lane ``to`` (an async
        task met by the inline lane): it starts there next, ahead of that lane's queue."""
        with self.cv:
            lane.running.pop(entry, None)
            self.started_jobs -= 1
            self.prefetch.learn(row, to)
            target = self.lanes[to]
            target.waiting.appendleft(row)
            target.on_rows()
            self.cv.notify_all()

    # --- the feeder's side ---------------------------------------------------------------

    def distribute(self, rows: list[Claimed], claimed_at: float, asked_at: float) -> None:
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
                lane = self.lanes[self.prefetch.lane_for_task(row.task_path)]
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
                self.hand_over_held_locked(time.monotonic())
            for name in touched:
                self.lanes[name].on_rows()
            self.cv.notify_all()

    def hand_over_held_locked(self, now: float) -> None:
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

    def check_horizon_locked(self, now: float) -> None:
        for lane in self.lanes.values():
            # Every slot of the lane runs a handler past the horizon: what waits for it
            # would wait longer than that.
            if lane.waiting and self.prefetch.stuck(lane, now):
                self.give_back_locked(lane, reason="behind_running_handler")
            elif now > lane.start_by and lane.queued:
                self.give_back_locked(lane, reason="claim_lease")

    def give_back_locked(self, lane: LaneRows, *, reason: str) -> None:
        if not lane.queued:
            return
        ids = [row.id for row in lane.waiting] + [row.id for _, row in lane.held]
        lane.waiting.clear()
        lane.held.clear()
        lane.start_by = float("inf")
        self.to_release.extend(ids)
        logger.debug("event=giving_back count=%d lane=%s reason=%s", len(ids), lane.name, reason)

    def job_ids_locked(self) -> list[str]:
        """The jobs the lanes hold (waiting, held, running)."""
        ids: list[str] = []
        for lane in self.lanes.values():
            ids.extend(str(row.id) for row in lane.waiting)
            ids.extend(str(row.id) for _, row in lane.held)
            ids.extend(str(row.id) for row, _ in lane.running.values())
        return ids

    def release(self, ids: list[uuid.UUID], *, stopping: bool) -> None:
        """Give rows taken back from the lanes to the queue (no lock held)."""
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
                logging.INFO if stopping else logging.DEBUG,
                "event=handed_back jobs=%d reason=%s",
                len(released),
                "shutdown" if stopping else "behind_running_handler",
            )


def _release(cursor: Any, *, worker: uuid.UUID, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return store.release(cursor, worker=worker, ids=ids)
