"""An executor's claims, made on its feeder's thread and connection: whether one is due
(room in a lane, the last one not just back empty, a rate's turn, the supervisor not holding
the claims), what each queue is asked for, the claim statement (with or without the limits'
planning), and what the rows it returns mean: run now (to the hand-out), expired, or kept
waiting by a limit until their turn. Then when to look again: at once after a full claim,
soon after one that came back short (RECHECKS), else at a wake-up or the poll interval.

The state is guarded by the feeder's lock (``cv``); the feeder's wait loop reads
``idle_until`` and ``rate_turns`` for its next deadline and clears ``idle_until`` when a
wake-up says to look now.
"""

from __future__ import annotations

import heapq
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
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


class Claimer:
    def __init__(
        self,
        cv: Any,
        *,
        config: WorkerConfig,
        db: Connection,
        token: uuid.UUID,
        lanes: dict[str, LaneRows],
        shares: QueueShares,
        prefetch: Prefetch,
        handout: Handout,
        publisher: Publisher | None,
        claims_held: Any,
        retire: Callable[[], None],
    ) -> None:
        self.cv = cv
        self.config = config
        self.db = db
        self.token = token
        self.lanes = lanes
        self.shares = shares
        self.prefetch = prefetch
        self.handout = handout
        # The executor's metrics, published after claims that did not start every row.
        self.publisher = publisher
        # The supervisor's word: nonzero while leases cannot be extended (no claims then).
        self.claims_held = claims_held
        # Called (lock held) once the executor has started its max_jobs_per_child: it stops
        # claiming and is recycled.
        self.retire = retire
        # No claim before this (monotonic) unless a rate's turn comes.
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
        # Burst mode ends once a claim made after the last write found nothing (the feeder
        # clears this when it writes outcomes).
        self.empty_since_write = False

    def claim_if_room(self, now: float) -> bool:
        """Claim if some lane has room and the last claim did not come back empty just now.
        True if it claimed anything."""
        with self.cv:
            turn = bool(self.rate_turns) and now >= self.rate_turns[0]
            if now < self.idle_until and not turn:
                return False
            if self.claims_held is not None and self.claims_held.value:
                # Looked at again soon; the supervisor's wake-up ends the wait sooner.
                self.idle_until = now + HELD_RECHECK
                return False
            while self.rate_turns and self.rate_turns[0] <= now:
                heapq.heappop(self.rate_turns)
            if self.config.max_jobs_per_child and self.handout.started_jobs >= self.config.max_jobs_per_child:
                self.retire()
                return False
            budget = self.prefetch.budget(self.lanes, now)
            if not budget:
                return False
            limit = self.prefetch.batch_limit(self.config.max_batch)
        quotas = self.shares.quotas(limit=limit, budget=self.prefetch.claim_budget(budget))
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
        with self.cv:
            self.prefetch.claimed(rows)
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


def _came_back_short(names: Sequence[str], quotas: Sequence[int], total: int, got: dict[str, int]) -> bool:
    """Whether a claim found fewer rows than asked for in every queue it asked (and in
    all): nothing more was due in any of them."""
    asked = [(name, quota) for name, quota in zip(names, quotas, strict=True) if quota]
    return sum(got.values()) < total and all(got.get(name, 0) < quota for name, quota in asked)
