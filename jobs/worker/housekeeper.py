"""The housekeeper: a ``runworker``'s one process that talks to the database on behalf of
the whole worker, so that the supervisor never does (its time limits and child watching
must go on while the database hangs: a server or pooler that takes a statement and never
answers blocks only this process, which the supervisor restarts when it stops making
progress).

What it does, each on the database's clock:

* **listens** for executors that cannot (behind a pooler, on JOBS_LISTEN_URL) and wakes
  them through their wake pipes (relay.py);
* **heartbeats**: extends the lease of exactly the jobs the executors run (their slot
  entries), every third of the shortest lease in hand (a claimed job's lease is short
  until it starts: store.UNSTARTED_LEASE); rows another transaction has locked are
  skipped and retried within ``RETRY_LOCKED``, so one lock never stops the others'
  extensions; keeps the worker's registry row fresh; tells the supervisor when the next
  extension is late (half an interval after it was due), so that a session that froze in
  a statement is replaced well within the lease;
* **reaps** leases that ran out, as soon as the earliest one does (plus a grace and a
  little jitter), so a dead worker's job is runnable again within about its lease, however
  long that is;
* **promotes** scheduled jobs as they come due (state ``scheduled`` to ``queued``) and
  wakes the workers of their queues;
* **folds** the console's aggregates together (jobs.stats.compact) every few seconds;
* **tends the limits' keys** now and then, by key (store.tend_limit_keys): a key with a
  slot free and jobs parked on it but none on their way wakes them (a safety net: a
  release wakes the next job itself), and keys no job names any more lose their rows;
* **settles** what a dead executor left (sent by the supervisor): the attempts it was
  running fail with the reason, its unstarted jobs go back unused.

Its pieces live beside it: the LISTEN relay (relay.py), the lease extensions' clock
(beats.py) and what a settlement is and writes (settlement.py); this module is the loop
that runs them on time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .. import stats, store
from ..db import Connection, is_conflict, is_connection_lost
from ..store import workflows as workflow_store
from . import registry
from .beats import heartbeat_interval, late_at, monotonic_at
from .config import WorkerConfig
from .executor import die_with_parent, name_process
from .metrics import MetricsTable, Publisher, WorkerCollector, serve
from .relay import NotifyRelay
from .settlement import Settlement, reaped_as, write_settlement
from .slots import SlotTable

logger = logging.getLogger("jobs.worker")

# libpq gives up within about two seconds on a peer that does not answer at all.
FAIL_FAST_LIBPQ = {
    "connect_timeout": 2,
    "tcp_user_timeout": 2000,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 2,
}
# A heartbeat that skipped locked rows tries them again this soon.
RETRY_LOCKED = 0.1
# The earliest lease and due time are read at least this often (a job claimed with a
# shorter lease, or enqueued for sooner, than the ones known).
MAX_DUE_CHECK = 1.0
# Reaping waits for the grace (store.REAP_GRACE) plus up to this much jitter, so that the
# workers of a large fleet do not all reap the same moment.
REAP_JITTER = 0.25
# The console's aggregates (jobs.stats) are folded together about this often.
COMPACT_INTERVAL = 10.0
# The limits' keys are looked over about this often (seconds).
LIMIT_KEYS_INTERVAL = 30.0
# After a failed statement, the same work is tried again after this long.
RETRY_AFTER = 1.0
# The loop looks at the slot table at least this often.
TICK = 0.1


@dataclass
class Housekeeper:
    config: WorkerConfig
    worker_id: uuid.UUID
    slots: SlotTable
    # Write ends of the executors' wake pipes.
    wake_fds: list[int]
    # Commands from the supervisor (settlements, "stop"), and acknowledgements back.
    commands_r: int
    acks_w: int
    # The supervisor's shared progress word: we bump it every turn of the loop.
    progress: Any = None
    # The worker's metrics (metrics.py; None: off) and the supervisor's words they read.
    metrics: MetricsTable | None = None
    executors_alive: Any = None
    last_beat_word: Any = None
    # When the next lease extension is late (monotonic), for the supervisor.
    beat_late_word: Any = None
    settlements: list[Settlement] = field(default_factory=list)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.db = Connection(self.config.database, name="jobs-housekeeper", libpq=FAIL_FAST_LIBPQ)
        self.relay = NotifyRelay(self.config, self.wake_fds, FAIL_FAST_LIBPQ)
        self.buffer = b""
        now = time.monotonic()
        self.next_heartbeat = now
        self.last_beat = -float("inf")
        self.next_due_check = now
        self.next_reap = float("inf")
        self.next_promote = float("inf")
        self.next_timeouts = float("inf")
        self.retry_locked_at = float("inf")
        self.next_compact = now + random.uniform(0, COMPACT_INTERVAL)
        self.next_limit_keys = now + random.uniform(0, LIMIT_KEYS_INTERVAL)
        self.unextended: set[uuid.UUID] = set()
        self.registered = False
        # Its own counts (what it settles and reaps) in the table's last region.
        self.publisher = (
            Publisher(self.metrics, self.metrics.regions - 1) if self.metrics is not None else None
        )

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        die_with_parent(os.getppid())
        name_process("jobs-housekeep")
        if self.metrics is not None and self.config.metrics_port:
            collector = WorkerCollector(
                self.metrics, self.slots, executors_alive=self.executors_alive, last_beat=self.last_beat_word
            )
            serve(collector, port=self.config.metrics_port, addr=self.config.metrics_addr)
        self._db(lambda cursor: registry.register(cursor, self.worker_id, self.config), "register")
        while True:
            self._tick()
            self._read_commands()
            self._settle()
            if self.stopping and not self.settlements:
                break
            now = time.monotonic()
            self._schedule_heartbeat()
            if now >= self.next_heartbeat or now >= self.retry_locked_at:
                self._heartbeat(now)
            if now >= self.next_due_check:
                self._check_due(now)
            if now >= self.next_reap:
                self._reap(now)
            if now >= self.next_promote:
                self._promote(now)
            if now >= self.next_timeouts:
                self._expire_signal_waits(now)
            if now >= self.next_compact:
                self._compact(now)
            if now >= self.next_limit_keys:
                self._tend_limit_keys(now)
            self._wait()
        self._db(lambda cursor: registry.unregister(cursor, self.worker_id), "unregister")
        self.db.drop()
        self.relay.close()
        return 0

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress.value = time.monotonic()

    def _wait(self) -> None:
        now = time.monotonic()
        deadline = min(
            self.next_heartbeat,
            self.next_due_check,
            self.next_reap,
            self.next_promote,
            self.retry_locked_at,
            self.next_timeouts,
            self.next_compact,
            self.next_limit_keys,
        )
        timeout = min(max(deadline - now, 0.0), 1.0)
        fds = [self.commands_r]
        sock = self.relay.socket()
        if sock is not None:
            fds.append(sock)
        readable, _, _ = select.select(fds, [], [], timeout)
        if sock is not None and sock in readable:
            self.relay.drain()

    def wake_executors(self) -> None:
        self.relay.wake_executors()

    # --- heartbeat ---------------------------------------------------------------------------

    def _in_hand(self) -> tuple[list[tuple[uuid.UUID, uuid.UUID]], float, list[uuid.UUID]]:
        """(job id, token) of every running slot entry, the shortest lease among them (a
        job just started may still be under its short claim lease, store.UNSTARTED_LEASE,
        until its start mark lands), and the tokens of the live executors."""
        held: list[tuple[uuid.UUID, uuid.UUID]] = []
        tokens: list[uuid.UUID] = []
        shortest = self.config.lease_seconds
        for index in range(self.slots.executors):
            named = self.slots.executor(index)
            if named is None:
                continue
            token, _ = named
            tokens.append(token)
            for _, running in self.slots.running(index):
                held.append((running.job_id, token))
                shortest = min(shortest, running.lease_seconds, store.UNSTARTED_LEASE)
        return held, shortest, tokens

    def _schedule_heartbeat(self) -> None:
        """Beat every third of the shortest lease in hand (looked at every tick, so a job
        with a short lease that starts right after a beat gets its extension in time)."""
        _, shortest, _ = self._in_hand()
        interval = heartbeat_interval(shortest)
        self.next_heartbeat = min(self.next_heartbeat, self.last_beat + interval)
        if self.beat_late_word is not None and self.last_beat > -float("inf"):
            # A job with a shorter lease started: its extensions are due sooner.
            late = late_at(self.last_beat, interval)
            if late < self.beat_late_word.value:
                self.beat_late_word.value = late

    def _heartbeat(self, now: float) -> None:
        held, shortest, tokens = self._in_hand()
        interval = heartbeat_interval(shortest)
        retry_only = now < self.next_heartbeat
        if retry_only:
            held = [pair for pair in held if pair[0] in self.unextended]

        def beat(cursor: Any) -> store.Beat:
            done = store.extend_leases(cursor, held=held, lease_seconds=self.config.lease_seconds)
            if not retry_only:
                registry.heartbeat(cursor, self.worker_id, self.config, tokens=tokens, jobs_in_hand=len(held))
                registry.expire(cursor)
            return done

        done = self._db(beat, "heartbeat")
        if done is None:
            # The database is away: try again soon, not at the next full interval.
            self.next_heartbeat = now + min(interval, RETRY_AFTER)
            return
        if not retry_only:
            self.last_beat = now
            self.next_heartbeat = now + interval
            if self.last_beat_word is not None:
                self.last_beat_word.value = time.time()
            if self.beat_late_word is not None:
                self.beat_late_word.value = late_at(now, interval)
        # Skipped while another transaction had them locked: try those again soon. A job no
        # longer held (cancelled, reaped, finished meanwhile) waits for the next full beat,
        # which skips it too once its handler is gone from the slot table.
        self.unextended = done.locked
        self.retry_locked_at = now + RETRY_LOCKED if self.unextended else float("inf")

    # --- reaper and promoter -----------------------------------------------------------------

    def _check_due(self, now: float) -> None:
        self.next_due_check = now + min(MAX_DUE_CHECK, self.config.poll_interval, self.config.reaper_interval)
        due = self._db(store.next_due, "due")
        if due is None:
            return
        self.next_reap = monotonic_at(
            now, due.now, due.lease_expires, store.REAP_GRACE + random.uniform(0, REAP_JITTER)
        )
        self.next_promote = monotonic_at(now, due.now, due.scheduled, 0.0)
        self.next_timeouts = monotonic_at(now, due.now, due.signal_timeout, 0.0)

    def _reap(self, now: float) -> None:
        self.next_reap = float("inf")

        def reap(cursor: Any) -> list[store.Reaped]:
            reaped = store.reap(
                cursor, backoff_base=self.config.backoff_base, backoff_cap=self.config.backoff_cap
            )
            registry.expire(cursor)
            return reaped

        reaped = self._db(reap, "reap")
        if reaped is None:
            self.next_reap = now + RETRY_AFTER
            return
        for row in reaped:
            if self.publisher is not None and not row.unstarted:
                self.publisher.tally.count(row.task_path, row.queue_name, reaped_as(row, "lease_lost"))
            logger.warning(
                "event=reaped job=%s task=%s attempt=%d outcome=%s reason=%s",
                row.id,
                row.task_path,
                row.attempt,
                "released" if row.unstarted else reaped_as(row, "dead" if row.state == "dead" else "retry"),
                "'worker lost before the job started'" if row.unstarted else "'worker lost'",
            )
        if reaped and self.publisher is not None:
            self.publisher.publish()
        if reaped:
            # More may have expired meanwhile; and given-back jobs are due now.
            self.next_due_check = now
            if any(row.unstarted for row in reaped):
                self.wake_executors()

    def _promote(self, now: float) -> None:
        self.next_promote = float("inf")
        promoted = self._db(store.promote, "promote")
        if promoted is None:
            self.next_promote = now + RETRY_AFTER
            return
        if promoted:
            logger.debug("event=promoted %s", " ".join(f"{q}={n}" for q, n in promoted.items()))
            self.wake_executors()
            self.next_due_check = now

    def _expire_signal_waits(self, now: float) -> None:
        """Workflows' signal waits whose timeout passed fail (and their workflows with them)."""
        self.next_timeouts = float("inf")
        expired = self._db(workflow_store.expire_signals, "signal_timeouts")
        if expired is None:
            self.next_timeouts = now + RETRY_AFTER
            return
        if expired:
            logger.info("event=signal_waits_timed_out count=%d", expired)
            # Compensations may have become due.
            self.wake_executors()
            self.next_due_check = now

    # --- settlements ---------------------------------------------------------------------------

    def _compact(self, now: float) -> None:
        # Jittered, so that the workers of a fleet take turns rather than all at once.
        self.next_compact = now + COMPACT_INTERVAL * random.uniform(0.75, 1.25)
        self._db(stats.compact, "compact")

    def _tend_limit_keys(self, now: float) -> None:
        self.next_limit_keys = now + LIMIT_KEYS_INTERVAL * random.uniform(0.75, 1.25)
        tended = self._db(store.tend_limit_keys, "limit_keys")
        if tended is None:
            return
        if tended.woken:
            # Each was parked with a slot free and no wake-up on its way: a lost wake-up.
            logger.info("event=limit_waits_woken count=%d", tended.woken)
        if tended.dropped:
            logger.debug("event=limit_keys_dropped count=%d", tended.dropped)

    def _read_commands(self) -> None:
        readable, _, _ = select.select([self.commands_r], [], [], 0)
        if not readable:
            return
        chunk = os.read(self.commands_r, 65536)
        if not chunk:
            # The supervisor is gone (killed): so is the worker. Its row and its jobs are
            # left to expire, as for any worker that vanished.
            os._exit(1)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line == b"stop":
                self.stopping = True
            elif line:
                self.settlements.append(Settlement.parse(line))

    def _settle(self) -> None:
        while self.settlements:
            settlement = self.settlements[0]
            counted = self._db(
                lambda cursor, s=settlement: write_settlement(cursor, self.config, s), "settle"
            )
            if counted is None:
                return
            if self.publisher is not None:
                for task, queue, outcome in counted:
                    self.publisher.tally.count(task, queue, outcome)
                self.publisher.publish()
            self.settlements.pop(0)
            with contextlib.suppress(OSError):
                os.write(self.acks_w, f"{settlement.seq}\n".encode())

    # --- the connection ----------------------------------------------------------------------

    def _db(self, operation: Any, what: str) -> Any:
        """Run a statement; None if the database is away or refused it (logged)."""
        try:
            return self.db.run(operation, retry=False)
        except psycopg.Error as exc:
            if is_conflict(exc, self.db.conn):
                # Logged by the connection (event=db_conflict); the next round runs it again.
                return None
            if is_connection_lost(exc):
                logger.warning("event=db_unavailable op=%s error=%r", what, str(exc).strip())
            else:
                logger.warning("event=db_error op=%s error=%r", what, str(exc).strip())
            return None
