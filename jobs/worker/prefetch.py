"""How much an executor claims ahead, and for which lane: a pure policy, with no thread,
lock or connection of its own (the feeder calls it with its lock held).

An executor claims expected work, not a count of jobs: for the inline lane, seconds of
expected run time up to the prefetch horizon (topped up once half of it is used); for the
thread and async lanes, their free slots. A queue's expected run time is learned from its
jobs (a running average), a task's too, and so is the lane each task runs in.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..store import Claimed
from .lane_rows import ASYNC, INLINE, THREADS, LaneRows

# Weight of the newest duration (or claim's row size) in a running average.
EWMA = 0.2
# A claim takes at most about this many bytes of payloads (args and kwargs as JSON text),
# at the average size of the rows claimed so far: quick jobs with large payloads are
# claimed in smaller batches than JOBS_MAX_BATCH, so that the rows an executor holds stay
# small (1,000 rows of 60 KB held 170 MiB, and drained slower than batches of 200).
CLAIM_BYTES = 8 * 1024 * 1024


class Prefetch:
    def __init__(self, horizon: float, lanes: Collection[str]) -> None:
        # How much expected work is claimed ahead, and how long rows may wait behind
        # running handlers.
        self.horizon = horizon
        self.lanes = frozenset(lanes)
        # Per queue: expected run time of an inline job, and the lane its jobs went to.
        self.expected: dict[str, float] = {}
        self.lane_of_queue: dict[str, str] = {}
        # Per task: the lane it runs in (learned when a lane first resolves it) and its
        # expected run time.
        self.lane_of_task: dict[str, str] = {}
        self.task_time: dict[str, float] = {}
        # The average size of a claimed row's payloads, bytes (None: nothing claimed yet).
        self.row_bytes: float | None = None

    # --- learning ------------------------------------------------------------------------

    def finished(self, row: Claimed, lane: str, duration: float) -> None:
        """An attempt of ``row`` took ``duration`` seconds in ``lane``."""
        previous_task = self.task_time.get(row.task_path)
        if previous_task is None:
            # A task's first job pays for importing it: not a measure of the next ones.
            self.task_time[row.task_path] = duration / 10
            return
        self.task_time[row.task_path] = previous_task + EWMA * (duration - previous_task)
        if lane == INLINE:
            previous = self.expected.get(row.queue_name)
            self.expected[row.queue_name] = (
                duration if previous is None else previous + EWMA * (duration - previous)
            )

    def learn(self, row: Claimed, lane: str) -> None:
        """``row``'s task runs in ``lane`` (and so, likely, do its queue's jobs)."""
        self.lane_of_task[row.task_path] = lane
        self.lane_of_queue[row.queue_name] = lane

    def claimed(self, rows: Sequence[Claimed]) -> None:
        """A claim brought ``rows``: the size of their payloads."""
        if rows:
            size = sum(len(row.args) + len(row.kwargs) for row in rows) / len(rows)
            previous = self.row_bytes
            self.row_bytes = size if previous is None else previous + EWMA * (size - previous)

    def slow(self, task_path: str) -> bool:
        """The task is known to outlast the horizon: what waits behind it would wait long."""
        return self.task_time.get(task_path, 0.0) > self.horizon

    # --- the claim's budget --------------------------------------------------------------

    def budget(self, lanes: Mapping[str, LaneRows], now: float) -> dict[Any, float]:
        """How much each lane can take now: seconds of expected work for the inline lane
        (topped up to the horizon once half of it is used), free slots for the others."""
        budget: dict[Any, float] = {}
        horizon = self.horizon
        inline = lanes.get(INLINE)
        if inline is not None and not self.stuck(inline, now):
            ahead = sum(self.expected_time(row.queue_name) for row in inline.waiting)
            ahead += sum(self.expected_time(row.queue_name) for _, row in inline.held)
            for row, at in inline.running.values():
                ahead += max(self.expected_time(row.queue_name) - (now - at), 0.0)
            if not inline.waiting and not inline.running:
                # An idle handler takes a job whatever the horizon (0: nothing claimed
                # ahead, one job at a time): spend lets a job overrun what is left.
                budget[INLINE] = max(horizon, 1e-9)
            elif ahead < horizon / 2:
                budget[INLINE] = horizon - ahead
        for name in (THREADS, ASYNC):
            lane = lanes.get(name)
            if lane is not None and lane.free > 0:
                budget[name] = float(lane.free)
        return budget

    def stuck(self, lane: LaneRows, now: float) -> bool:
        """Every slot of the lane runs a handler that has outlived the horizon: rows given
        to it would only wait (and be given back)."""
        horizon = self.horizon
        return len(lane.running) >= len(lane.entries) and all(
            now - at > horizon for _, at in lane.running.values()
        )

    def expected_time(self, queue: str) -> float:
        expected = self.expected.get(queue)
        return self.horizon if expected is None else expected

    def batch_limit(self, max_batch: int) -> int:
        """The most rows the next claim may take: ``max_batch`` (JOBS_MAX_BATCH), or fewer
        where the rows claimed so far were large (CLAIM_BYTES)."""
        if self.row_bytes is None:
            return max_batch
        return max(1, min(max_batch, int(CLAIM_BYTES / self.row_bytes)))

    def claim_budget(self, budget: Mapping[Any, float]) -> ClaimBudget:
        """A claim's budget (a copy of ``budget``), to size it by (fairness.QueueShares)."""
        return ClaimBudget(self, dict(budget))

    # --- lane choice ---------------------------------------------------------------------

    def lane_for_queue(self, queue: str) -> str:
        lane = self.lane_of_queue.get(queue)
        if lane is None or lane not in self.lanes:
            return self._default_lane()
        return lane

    def lane_for_task(self, task_path: str) -> str:
        lane = self.lane_of_task.get(task_path)
        if lane is None or lane not in self.lanes:
            # Unknown tasks start where a blocking one would: resolving one may import code.
            return self._default_lane()
        return lane

    def _default_lane(self) -> str:
        return THREADS if THREADS in self.lanes else INLINE


class ClaimBudget:
    """What one claim may still take: seconds of expected work for the inline lane, free
    slots for the others (Prefetch.budget). A job may overrun what is left: it is still
    worth starting. A queue whose inline jobs are not measured yet gets one job per claim.
    Weighted queues size a claim job by job: each queue's lane and cost are looked up once."""

    def __init__(self, policy: Prefetch, left: dict[Any, float]) -> None:
        self.policy = policy
        self.left = left
        # Per queue: its jobs' lane and what one of them spends there (None: not measured).
        self.costs: dict[str, tuple[str, float | None]] = {}

    def _cost(self, queue: str) -> tuple[str, float | None]:
        cost = self.costs.get(queue)
        if cost is None:
            lane = self.policy.lane_for_queue(queue)
            expected = self.policy.expected.get(queue) if lane == INLINE else 1.0
            cost = self.costs[queue] = (lane, None if expected is None else max(expected, 1e-6))
        return cost

    def spend(self, queue: str, at_most: int = 1) -> int:
        """Take up to ``at_most`` jobs of ``queue`` out of the budget, as many as its lane
        has budget left for; returns how many (counted in one step, not job by job)."""
        lane, cost = self._cost(queue)
        left = self.left.get(lane, 0.0)
        if left <= 0 or at_most <= 0:
            return 0
        if cost is None:
            if self.left.get(("once", queue)):
                return 0
            self.left[("once", queue)] = 1
            return 1
        # One job (a weighted pick, once per job of a claim) skips the division: 31 ns, not 87.
        taken = 1 if at_most == 1 else min(at_most, math.ceil(left / cost))
        self.left[lane] = left - taken * cost
        return taken
