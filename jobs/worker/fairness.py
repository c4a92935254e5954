"""How an executor shares its capacity between its queues, claim after claim.

Weighted queues (``email:6,low:1``) get jobs started in proportion to their weights,
whatever their jobs cost: stride scheduling. Each queue keeps a *pass*; taking one job
from a queue advances its pass by ``1 / weight``, and the next job always comes from the
queue with the lowest pass. A claim is a run of such picks, so a batch of 14 from
``email:6,low:1`` asks 12 of email and 2 of low, and the batches after it continue where
it stopped, so a batch of one alternates 6:1 over time. Which pick a job was is also its
place in the batch, so the queues stay interleaved inside a batch, and each queue's jobs
keep their own order (priority, then run_at).

A queue that had fewer due jobs than asked is *dry*: the picks skip it, so others get its
share (nothing idles while work waits), and it gets one probe per claim so that new work
is noticed. A dry queue collects no credit: when it has work again its pass starts at the
lowest pass of the others, or it would take a burst for the time it was empty.

``strict`` instead drains earlier queues first: every queue is asked for everything, and
the claim's own order visits them first to last.

The cost of a pick is the caller's: ``quotas`` takes the claim's budget (``Budget``),
where a job spends its expected run time for the inline handler and one slot for a pool of
handlers, so batch sizes follow each queue's own jobs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Budget(Protocol):
    """What a claim may still take (jobs/worker/prefetch.py)."""

    def spend(self, queue: str, at_most: int = 1) -> int:
        """Take up to ``at_most`` jobs of ``queue`` out of the budget; how many it took."""


@dataclass
class QueueShares:
    queues: tuple[tuple[str, int], ...]
    strict: bool = False
    passes: dict[str, float] = field(default_factory=dict)
    dry: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        for name, _ in self.queues:
            self.passes.setdefault(name, 0.0)
        self.names = [name for name, _ in self.queues]
        self.stride = {name: 1.0 / weight for name, weight in self.queues}

    def quotas(self, *, limit: int, budget: Budget) -> list[int]:
        """How many jobs to ask of each queue (in ``self.names`` order), at most ``limit``
        in all, spent from ``budget``. All zero: no room for anything."""
        if self.strict or len(self.queues) == 1:
            # Earlier queues first: each may fill the batch; size it by the first queue's jobs.
            return [budget.spend(self.names[0], limit)] * len(self.queues)
        quota = dict.fromkeys(self.names, 0)
        active = [name for name in self.names if name not in self.dry] or list(self.names)
        heap = [(self.passes[name], index, name) for index, name in enumerate(self.names) if name in active]
        heapq.heapify(heap)
        spend, stride = budget.spend, self.stride
        picked = 0
        while heap and picked < limit:
            at, index, name = heap[0]
            if len(heap) == 1:
                # One queue left: its picks follow one another, spent in one step.
                taken = spend(name, limit - picked)
                quota[name] += taken
                picked += taken
                break
            if not spend(name):
                # No budget left for this queue's jobs; others may still fit.
                heapq.heappop(heap)
                continue
            quota[name] += 1
            picked += 1
            heapq.heapreplace(heap, (at + stride[name], index, name))
        if picked:
            for name in self.dry:
                # One probe, so that a queue that got work again is seen.
                quota[name] = max(quota[name], 1)
        return [quota[name] for name in self.names]

    def batch_size(self, quotas: Sequence[int], limit: int) -> int:
        """The claim's overall LIMIT for these quotas."""
        if self.strict or len(self.queues) == 1:
            return min(limit, quotas[0])
        return min(limit, sum(quotas))

    def took(self, asked: Sequence[int], got: dict[str, int]) -> None:
        """Account for a claim: advance the passes of what was taken, note dry queues."""
        if self.strict or len(self.queues) == 1:
            return
        was_dry = set(self.dry)
        for name, quota in zip(self.names, asked, strict=True):
            taken = got.get(name, 0)
            self.passes[name] += taken * self.stride[name]
            if taken < quota:
                self.dry.add(name)
            else:
                self.dry.discard(name)
        # A queue that woke up starts level with the ones that kept working.
        kept_working = [name for name in self.names if name not in was_dry and name not in self.dry]
        if kept_working:
            floor = min(self.passes[name] for name in kept_working)
            for name in was_dry - self.dry:
                self.passes[name] = max(self.passes[name], floor)
        lowest = min(self.passes.values())
        if lowest > 1e6:
            # Only differences matter; keep the numbers small enough to stay exact.
            for name in self.passes:
                self.passes[name] -= lowest

    def order(self, rows: Sequence[tuple[str, int]]) -> list[int]:
        """The order to start a claimed batch in: indexes into ``rows``, each a (queue,
        position within that queue) pair. Interleaved by pass for weighted queues (the
        passes as they were before ``took``), queue by queue for strict ones."""
        rank = {name: index for index, name in enumerate(self.names)}
        if self.strict or len(self.queues) == 1:
            return sorted(range(len(rows)), key=lambda i: (rank.get(rows[i][0], 0), rows[i][1]))
        return sorted(
            range(len(rows)),
            key=lambda i: (
                self.passes.get(rows[i][0], 0.0) + (rows[i][1] + 1) * self.stride.get(rows[i][0], 1.0),
                rank.get(rows[i][0], 0),
            ),
        )
