"""A ``runworker``'s Prometheus metrics: counted where things happen, served by the
housekeeper (``--metrics-port``, ``JOBS_METRICS_PORT``).

Counting costs a no-op job nothing it would notice. A drained no-op job takes tens of
microseconds; prometheus-client's multiprocess mode writes a memory-mapped file per
increment and observation (about 10 µs for a job's counter and two histograms, measured),
which would cost a quarter of the drain rate. So each process that counts (every
executor, and the housekeeper for what it settles and reaps) keeps a ``Tally`` of plain
integers, and publishes a snapshot of it into its region of a ``MetricsTable`` (memory
shared by the whole worker, like the slot table) after each batch of outcomes it writes.
No system call per job, none per publish.

A region outlives its process: an executor started in a dead one's place begins from the
counts the region holds, so counters only grow while the worker runs. A region is written
in two halves, in turn, each under its own sequence number, so a process killed in the
middle of a publish leaves the previous snapshot whole.

The housekeeper serves ``/metrics`` from a thread of its own that reads the regions, the
slot table and the supervisor's shared words: no database, no lock the worker's loops
take. The supervisor, which enforces time limits, serves nothing.

Labels are task paths, queue names and outcomes, all bounded by the code that runs; ids,
arguments and errors never become labels.
"""

from __future__ import annotations

import bisect
import json
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

from .seqlock import WORD, SequenceWords
from .slots import SlotTable

logger = logging.getLogger("jobs.worker")

PREFIX = "jobs_"
# Seconds. Run durations from a no-op to a long report; queue waits from a prompt pickup
# to an hour behind.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# How a finished attempt is counted (jobs_finished_total's outcome label). The per-job log
# line's labels map onto these.
OUTCOMES = {
    "succeeded": "succeeded",
    "retry": "retried",
    "snoozed": "snoozed",
    "waiting": "waiting",
    "dead": "dead",
    "cancelled": "cancelled",
}
# Distinct label sets one process keeps; past it, the rest are counted under task "other"
# (a bug that made task names unbounded must not grow the exposition without end).
MAX_SERIES = 2000
OTHER = "other"

# Each half: a sequence word (seqlock.py), then generation and length, then the body.
_META = struct.Struct("=QI")
_BODY = WORD + _META.size
_READ_PATIENCE = 0.1
_HALF = 512 * 1024


class Tally:
    """What one process counted since the worker started (its region's counts included).

    The lanes' threads and the feeder thread count; the feeder publishes. One lock, held
    for a few dictionary operations, keeps increments from being lost between threads and
    snapshots whole.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # (task, queue, outcome) -> count
        self.finished: dict[tuple[str, str, str], int] = {}
        # task -> [bucket counts..., +Inf count, sum]
        self.durations: dict[str, list[float]] = {}
        # queue -> [bucket counts..., +Inf count, sum]
        self.waits: dict[str, list[float]] = {}
        # task -> count
        self.enqueued: dict[str, int] = {}

    # --- counting (the hot path: no allocation beyond a key's first time) -------------------

    def attempt(self, task: str, queue: str, outcome: str, duration: float, waited: float) -> None:
        """One attempt that ran to an outcome: ``duration`` seconds, after waiting ``waited``
        seconds from its due time to its claim."""
        duration_bucket = bisect.bisect_left(DURATION_BUCKETS, duration)
        wait_bucket = bisect.bisect_left(WAIT_BUCKETS, waited)
        with self.lock:
            self._count(task, queue, outcome, 1)
            histogram = self.durations.get(task) or _histogram(self.durations, task, DURATION_BUCKETS)
            histogram[duration_bucket] += 1
            histogram[-1] += duration
            histogram = self.waits.get(queue) or _histogram(self.waits, queue, WAIT_BUCKETS)
            histogram[wait_bucket] += 1
            histogram[-1] += waited

    def count(self, task: str, queue: str, outcome: str, n: int = 1) -> None:
        """An outcome decided outside an attempt (expired at claim, settled, reaped)."""
        with self.lock:
            self._count(task, queue, outcome, n)

    def _count(self, task: str, queue: str, outcome: str, n: int) -> None:
        key = (task, queue, outcome)
        count = self.finished.get(key)
        if count is None:
            if len(self.finished) >= MAX_SERIES:
                key = (OTHER, queue, outcome)
            count = self.finished.get(key, 0)
        self.finished[key] = count + n

    def count_enqueued(self, task: str, n: int) -> None:
        with self.lock:
            if task not in self.enqueued and len(self.enqueued) >= MAX_SERIES:
                task = OTHER
            self.enqueued[task] = self.enqueued.get(task, 0) + n

    # --- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "finished": [[*key, n] for key, n in self.finished.items()],
                "durations": [[key, list(h)] for key, h in self.durations.items()],
                "waits": [[key, list(h)] for key, h in self.waits.items()],
                "enqueued": list(self.enqueued.items()),
            }

    def restore(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.finished = {(t, q, o): n for t, q, o, n in data.get("finished", [])}
            self.durations = {key: h for key, h in data.get("durations", [])}
            self.waits = {key: h for key, h in data.get("waits", [])}
            self.enqueued = {key: n for key, n in data.get("enqueued", [])}


def _histogram(table: dict[str, list[float]], key: str, buckets: tuple[float, ...]) -> list[float]:
    if len(table) >= MAX_SERIES:
        key = OTHER
    return table.setdefault(key, [0] * (len(buckets) + 1) + [0.0])


class MetricsTable:
    """One region per counting process (executor slots, then the housekeeper), in memory
    shared by the worker's processes (made before they are forked)."""

    def __init__(self, regions: int) -> None:
        self.regions = regions
        self.buf = mmap.mmap(-1, regions * 2 * _HALF)
        self.seq = SequenceWords(self.buf)
        self.full_warned = False
        # Per region, the newest whole half this process has read: (generation, body).
        self.last_read: dict[int, tuple[int, bytes]] = {}

    def _offset(self, region: int, half: int) -> int:
        return (region * 2 + half) * _HALF

    def read(self, region: int) -> dict[str, Any]:
        """The newest whole snapshot in ``region`` ({} if none).

        The two halves are read as one: a reader slower than its writer could otherwise
        take an old half for the newest (the other half rewritten twice while it read), or
        find each half in the middle of a write and take the region for empty; a scrape
        would show either as counters going back. A pass in which a half's sequence word
        changed is read again, for up to _READ_PATIENCE; a writer killed mid-write leaves
        its half odd and unchanging, which settles. A writer that never lets a pass settle
        (a reader starved of the CPU) still leaves whole halves now and then: the newest
        of those, and never one older than this process read before."""
        give_up = time.monotonic() + _READ_PATIENCE
        best = self.last_read.get(region)
        while True:
            found, settled = self._newest(region)
            if found is not None and (best is None or found[0] >= best[0]):
                best = found
            if settled or time.monotonic() > give_up:
                break
            os.sched_yield()
        if best is None:
            return {}
        self.last_read[region] = best
        try:
            value: dict[str, Any] = json.loads(best[1])
        except ValueError:
            return {}
        return value

    def _newest(self, region: int) -> tuple[tuple[int, bytes] | None, bool]:
        """The newest whole half (generation, body), and whether neither half changed
        meanwhile."""
        offsets = [self._offset(region, half) for half in (0, 1)]
        before = [self.seq.load(offset) for offset in offsets]
        bodies: list[tuple[int, bytes] | None] = []
        for offset, seq in zip(offsets, before, strict=True):
            generation, length = _META.unpack_from(self.buf, offset + WORD)
            if seq % 2 or not length or length > _HALF - _BODY:
                bodies.append(None)
            else:
                bodies.append((generation, bytes(self.buf[offset + _BODY : offset + _BODY + length])))
        after = [self.seq.load(offset) for offset in offsets]
        # A half whose word moved while it was read is not whole.
        whole = [body for body, b, a in zip(bodies, before, after, strict=True) if body and b == a]
        return max(whole, default=None, key=lambda body: body[0]), before == after

    def write(self, region: int, data: dict[str, Any]) -> None:
        body = json.dumps(data, separators=(",", ":")).encode()
        if len(body) > _HALF - _BODY:
            if not self.full_warned:
                self.full_warned = True
                logger.warning("event=metrics_region_full bytes=%d", len(body))
            return
        generations = [_META.unpack_from(self.buf, self._offset(region, half) + WORD)[0] for half in (0, 1)]
        half = 0 if generations[0] <= generations[1] else 1
        offset = self._offset(region, half)
        seq = self.seq.begin(offset)
        _META.pack_into(self.buf, offset + WORD, max(generations) + 1, len(body))
        self.buf[offset + _BODY : offset + _BODY + len(body)] = body
        self.seq.end(offset, seq)


class Publisher:
    """A process's tally and the region it publishes to."""

    def __init__(self, table: MetricsTable, region: int) -> None:
        self.table = table
        self.region = region
        self.tally = Tally()
        self.tally.restore(table.read(region))

    def publish(self) -> None:
        self.table.write(self.region, self.tally.snapshot())


class WorkerCollector:
    """Reads every region, the slot table and the supervisor's shared words at scrape time."""

    def __init__(
        self, table: MetricsTable, slots: SlotTable, *, executors_alive: Any, last_beat: Any
    ) -> None:
        self.table = table
        self.slots = slots
        self.executors_alive = executors_alive
        self.last_beat = last_beat

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        finished: dict[tuple[str, str, str], int] = {}
        durations: dict[str, list[float]] = {}
        waits: dict[str, list[float]] = {}
        enqueued: dict[str, int] = {}
        for region in range(self.table.regions):
            data = self.table.read(region)
            for task, queue, outcome, n in data.get("finished", []):
                finished[(task, queue, outcome)] = finished.get((task, queue, outcome), 0) + n
            _add_histograms(durations, data.get("durations", []))
            _add_histograms(waits, data.get("waits", []))
            for task, n in data.get("enqueued", []):
                enqueued[task] = enqueued.get(task, 0) + n

        family = CounterMetricFamily(
            f"{PREFIX}finished",
            "Attempts finished, by task, queue and outcome.",
            labels=["task", "queue", "outcome"],
        )
        for (task, queue, outcome), n in sorted(finished.items()):
            family.add_metric([task, queue, outcome], n)
        yield family
        family = CounterMetricFamily(
            f"{PREFIX}enqueued", "Jobs enqueued by handlers, by task.", labels=["task"]
        )
        for task, n in sorted(enqueued.items()):
            family.add_metric([task], n)
        yield family
        yield _histogram_family(
            f"{PREFIX}run_duration_seconds", "Handler run time, by task.", "task", durations, DURATION_BUCKETS
        )
        yield _histogram_family(
            f"{PREFIX}queue_wait_seconds", "From due time to start, by queue.", "queue", waits, WAIT_BUCKETS
        )
        in_hand = sum(len(self.slots.running(index)) for index in range(self.slots.executors))
        yield GaugeMetricFamily(
            f"{PREFIX}worker_jobs_in_hand", "Jobs the executors are running now.", value=in_hand
        )
        yield GaugeMetricFamily(
            f"{PREFIX}worker_executors_alive", "Executor processes alive.", value=self.executors_alive.value
        )
        yield GaugeMetricFamily(
            f"{PREFIX}worker_last_heartbeat_timestamp_seconds",
            "When the worker last extended its leases and registry row (Unix time; 0: not yet).",
            value=self.last_beat.value,
        )


def _add_histograms(into: dict[str, list[float]], entries: list[list[Any]]) -> None:
    for key, values in entries:
        total = into.get(key)
        if total is None:
            into[key] = list(values)
        else:
            for i, value in enumerate(values):
                total[i] += value


def _histogram_family(
    name: str, documentation: str, label: str, data: dict[str, list[float]], buckets: tuple[float, ...]
) -> Any:
    from prometheus_client.core import HistogramMetricFamily

    family = HistogramMetricFamily(name, documentation, labels=[label])
    for key, values in sorted(data.items()):
        cumulative = 0.0
        points = []
        for bound, n in zip((*buckets, float("inf")), values[:-1], strict=True):
            cumulative += n
            points.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        family.add_metric([key], points, sum_value=values[-1])
    return family


def serve(collector: WorkerCollector, *, port: int, addr: str) -> bool:
    """Serve ``/metrics`` on a daemon thread; False (logged) if the port cannot be had."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        logger.error("event=metrics_unavailable port=%d error=%r", port, str(exc))
        return False
    logger.info("event=metrics_serving addr=%s port=%d", addr, port)
    return True
