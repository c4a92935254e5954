"""Throughput and latency of the queue on the local database, for no-op jobs.

Run through ``scripts/bench`` (a dedicated database) or ``manage.py benchmark``. Each
figure is the median of ``runs`` repetitions. Workers are real ``runworker`` processes
with per-job logging off (it is a log line per job; with it on, drain rates fall).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.tasks import task

from jobs.backend import enqueue_many
from lab import wal

ROOT = Path(__file__).resolve().parent.parent


@task
def noop() -> None:
    return None


@task
def stamp() -> float:
    """Returns the wall-clock time the handler started: pickup latency."""
    return time.time()


@dataclass
class Report:
    runs: int
    figures: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.figures.setdefault(name, []).append(value)

    def medians(self) -> dict[str, float]:
        return {name: statistics.median(values) for name, values in self.figures.items()}


def _truncate() -> None:
    """An empty table, analysed while empty, on the connection of the measure before: the
    plans its prepared statements get next are made on statistics that say the table is
    empty, the trap the enqueue's wake-up check once fell in (jobs_queue_has_due, migration
    0014: every run after the first then measured 1,100 enqueues/s instead of 2,400). Each
    run measures the same now, or shows the trap back."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job")
        cursor.execute("VACUUM ANALYZE jobs_job")


def _worker_env(**extra: str) -> dict[str, str]:
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    env.update(
        DATABASE_URL=f"postgres://{db['USER'] or ''}@{host}/{db['NAME']}",
        PYTHONPATH=str(ROOT),
        JOBS_LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def measure_single_enqueue(count: int) -> float:
    _truncate()
    started = time.perf_counter()
    for _ in range(count):
        noop.enqueue()
    return count / (time.perf_counter() - started)


# The reference for one enqueue per transaction: the cheapest write a transaction can make,
# a one-row autocommit INSERT into a narrow table with a primary key, on the same connection.
BARE_TABLE = "lab_bare_insert"


def measure_bare_insert(count: int) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {BARE_TABLE} "
            "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"
        )
        cursor.execute(f"TRUNCATE {BARE_TABLE}")
        started = time.perf_counter()
        for _ in range(count):
            cursor.execute(f"INSERT INTO {BARE_TABLE} DEFAULT VALUES")
        return count / (time.perf_counter() - started)


def measure_wal(count: int) -> dict[str, float] | None:
    """WAL bytes per no-op job (full-page images left out: they follow the checkpoints, not
    the statements), from the log (lab/wal.py): enqueued one per transaction, then drained by
    ``runworker --burst`` with one executor (claims and outcomes, and the worker's own rows).
    None where the server has no pg_walinspect."""
    _truncate()
    with connection.cursor() as cursor:
        if not wal.available(cursor):
            return None
        wal.hold(cursor)
        start = wal.position(cursor)
        for _ in range(count):
            noop.enqueue()
        enqueued = wal.position(cursor)
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", "--concurrency=1"],
            env=_worker_env(),
            check=True,
        )
        drained = wal.position(cursor)
        _check_succeeded(count)
        enqueue = wal.between(cursor, start, enqueued)
        drain = wal.between(cursor, enqueued, drained)
        cursor.execute("SELECT pg_drop_replication_slot('lab_wal_' || pg_backend_pid())")
    return {
        "wal_bytes_per_job": (enqueue.without_fpi + drain.without_fpi) / count,
        "wal_bytes_per_job_enqueue": enqueue.without_fpi / count,
        "wal_bytes_per_job_claim_outcome": drain.without_fpi / count,
        "wal_index_entries_per_job": (enqueue.index_entries + drain.index_entries) / count,
    }


def measure_bulk_enqueue(count: int, batch: int) -> float:
    _truncate()
    calls: list[tuple[tuple[()], dict[str, object]]] = [((), {})] * batch
    started = time.perf_counter()
    for _ in range(count // batch):
        enqueue_many(noop, calls)
    return (count // batch) * batch / (time.perf_counter() - started)


def measure_drain(
    count: int, concurrency: int, *, logged: bool = False, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(jobs/s from first claim to last outcome in the database, jobs/s wall incl. start).
    With ``logged``, the per-job log line is on (written to /dev/null); ``env`` adds to the
    worker's environment."""
    _truncate()
    for _ in range(count // 10_000 + 1):
        enqueue_many(noop, [((), {})] * min(10_000, count))
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_job WHERE id IN (SELECT id FROM jobs_job OFFSET %s)", [count])
        cursor.execute("ANALYZE jobs_job")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", f"--concurrency={concurrency}"],
        env=_worker_env(**({"JOBS_LOG_LEVEL": "INFO"} if logged else {}), **(env or {})),
        stderr=subprocess.DEVNULL if logged else None,
        check=True,
    )
    wall = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE state = 'succeeded'), "
            "extract(epoch FROM max(finished_at) - min(started_at)) FROM jobs_job"
        )
        done, span = cursor.fetchone()
    if done != count:
        raise RuntimeError(f"drain finished {done} of {count} jobs")
    return count / float(span), count / wall


def measure_default_drain(count: int) -> float:
    """Jobs/s wall, start-up included, of ``runworker --burst`` as a user gets it: no options,
    the shipped log settings (the per-job lines at their default level)."""
    _fill(count)
    env = _worker_env()
    env.pop("JOBS_LOG_LEVEL")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst"],
        env=env,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - started
    _check_succeeded(count)
    return count / wall


def measure_startup() -> float:
    """Seconds from spawning ``runworker`` to its first handler starting (a job already due)."""
    _truncate()
    result = stamp.enqueue()
    spawned = time.time()
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst"], env=_worker_env()
    )
    try:
        worker.wait(60)
    finally:
        if worker.poll() is None:
            worker.kill()
    result.refresh()
    return float(result.return_value) - spawned


def _fill(count: int) -> None:
    _truncate()
    for start in range(0, count, 10_000):
        enqueue_many(noop, [((), {})] * min(10_000, count - start))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")


def _check_succeeded(count: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_job WHERE state = 'succeeded'")
        done = cursor.fetchone()[0]
    if done != count:
        raise RuntimeError(f"drain finished {done} of {count} jobs")


# The memory check samples an executor after this many jobs, then after all of them.
MEMORY_MARK = 1_000


def measure_memory(count: int) -> tuple[float, float]:
    """Resident memory (MiB) of one executor process after MEMORY_MARK and after ``count`` jobs."""
    _truncate()
    for start in range(0, count, 10_000):
        enqueue_many(noop, [((), {})] * min(10_000, count - start))
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--concurrency=1"], env=_worker_env()
    )
    samples = []
    try:
        for mark in (MEMORY_MARK, count):
            _wait_for(partial(_succeeded_at_least, mark), 120)
            samples.append(_rss_mib(_children(worker.pid)[0]))
    finally:
        worker.terminate()
        worker.wait(60)
    return samples[0], samples[1]


def _succeeded_at_least(count: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE state = 'succeeded' LIMIT %s) s", [count]
        )
        return int(cursor.fetchone()[0]) >= count


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def measure_pickup(samples: int) -> list[float]:
    """Milliseconds from just before enqueue to handler start, on an idle worker."""
    _truncate()
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--concurrency=1"],
        env=_worker_env(JOBS_POLL_INTERVAL="10"),
    )
    try:
        _wait_for(lambda: _count_workers() > 0, 20)
        time.sleep(0.5)
        latencies = []
        for _ in range(samples):
            before = time.time()
            result = stamp.enqueue()
            _wait_for(partial(_finished, result.id), 15)
            result.refresh()
            latencies.append((result.return_value - before) * 1000)
            time.sleep(0.02)
        return latencies
    finally:
        worker.terminate()
        worker.wait(30)


def _count_workers() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_worker")
        return int(cursor.fetchone()[0])


def _finished(job_id: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM jobs_job WHERE id = %s", [job_id])
        return cursor.fetchone()[0] == "succeeded"


def _wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step did not finish in time")
        time.sleep(0.0005)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def run(
    *, runs: int, single: int, bulk: int, drain: int, pickup: int, memory: int, echo: Callable[[str], None]
) -> Report:
    report = Report(runs=runs)
    for run_number in range(1, runs + 1):
        echo(f"run {run_number}/{runs}")
        enqueued = measure_single_enqueue(single)
        bare = measure_bare_insert(single)
        report.add("single_enqueue_per_s", enqueued)
        report.add("bare_insert_per_s", bare)
        report.add("single_enqueue_pct_of_bare_insert", 100 * enqueued / bare)
        report.add("bulk_enqueue_per_s", measure_bulk_enqueue(bulk, 5_000))
        for concurrency in (1, 2):
            in_db, wall = measure_drain(drain, concurrency)
            report.add(f"drain_{concurrency}_proc_per_s", in_db)
            report.add(f"drain_{concurrency}_proc_wall_per_s", wall)
        report.add("drain_2_proc_logged_per_s", measure_drain(drain, 2, logged=True)[0])
        report.add("drain_defaults_wall_per_s", measure_default_drain(drain))
        report.add("startup_to_first_handler_s", statistics.median(measure_startup() for _ in range(3)))
        latencies = measure_pickup(pickup)
        for pct in (50, 95, 99):
            report.add(f"pickup_p{pct}_ms", percentile(latencies, pct))
        for name, value in (measure_wal(single) or {}).items():
            report.add(name, value)
    if memory:
        after_1k, after_all = measure_memory(memory)
        report.add("executor_rss_after_1k_jobs_mib", after_1k)
        report.add(f"executor_rss_after_{memory // 1000}k_jobs_mib", after_all)
    report.notes = {
        "jobs": {"single": single, "bulk": bulk, "drain": drain, "pickup_samples": pickup, "memory": memory},
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    return report
