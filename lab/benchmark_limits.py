"""The limits' benchmarks (``scripts/bench limits``): a rate-limited backlog against its
limit, the drain rate of unlimited jobs beside limited ones waiting, and the pickup latency
of unrelated work while thousands of jobs wait on a concurrency limit."""

from __future__ import annotations

import subprocess
import sys
import time
from functools import partial
from typing import Any

from django.db import connection

from jobs.backend import enqueue_many
from jobs.limits import LimitSpec, parse_rate, registry

from .benchmark import ROOT, _count_workers, _finished, _truncate, _wait_for, _worker_env, noop, stamp


def _limited(rate: str) -> Any:
    options: Any = noop
    return options.using(rate_limit=rate)


def measure_rate_limited(rate_text: str, seconds: float, workers: int, concurrency: int) -> dict[str, float]:
    """Two (``workers``) long-running ``runworker`` processes on a backlog of jobs under a
    ``rate_text`` limit: started jobs per second over ``seconds`` (after a 3 s warm-up), and
    the most started in any 1-second window."""
    rate = parse_rate(rate_text) or 0.0
    _truncate()
    backlog = int(rate * (seconds + 10))
    for start in range(0, backlog, 5_000):
        enqueue_many(_limited(rate_text), [((), {})] * min(5_000, backlog - start))
    command = [sys.executable, str(ROOT / "manage.py"), "runworker", f"--concurrency={concurrency}"]
    procs = [subprocess.Popen(command, env=_worker_env()) for _ in range(workers)]
    try:
        time.sleep(3 + seconds + 1)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(started_at) FROM jobs_job WHERE started_at IS NOT NULL")
        (first,) = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM jobs_job WHERE started_at >= %(a)s + interval '3 s' "
            "AND started_at < %(a)s + make_interval(secs => 3 + %(s)s)",
            {"a": first, "s": seconds},
        )
        (in_window,) = cursor.fetchone()
        # Every 1-second window that starts at a job's start: the busiest one.
        cursor.execute(
            "SELECT max(n) FROM (SELECT count(*) OVER (ORDER BY started_at "
            "RANGE BETWEEN CURRENT ROW AND interval '999.999 ms' FOLLOWING) AS n "
            "FROM jobs_job WHERE started_at IS NOT NULL) w"
        )
        (busiest,) = cursor.fetchone()
    return {"per_s": in_window / seconds, "busiest_1s_window": float(busiest)}


def measure_drain_beside_limits(count: int, concurrency: int) -> float:
    """Jobs/s (first claim to last outcome) of ``count`` unlimited no-op jobs in a queue where
    5,000 jobs of 100 keys wait on their limits: 50 keys at a concurrency of 1 with their
    slot taken, 50 keys under a rate of 1 a minute. A first claim has set them waiting
    before the drain (as it does in a live queue), so the drain meets what limits leave in
    the table, and the claim's limit checks on every batch."""
    _truncate()
    options: Any = noop
    for name, spec in (
        ("bench-busy", LimitSpec.build("bench-busy", concurrency=1, per_key=True)),
        ("bench-slow", LimitSpec.build("bench-slow", rate="1/m", per_key=True)),
    ):
        registry.ensure("default", spec, source="settings")
        for key in range(50):
            enqueue_many(options.using(limit=name, limit_key=f"key:{key}", priority=1), [((), {})] * 50)
    with connection.cursor() as cursor:
        # Each busy key's one slot is taken (by a job that never ends within the run), as
        # behind a slow provider.
        cursor.execute("UPDATE jobs_limit_state SET running = 1 WHERE limit_name = 'bench-busy'")
    run_burst = [
        sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", f"--concurrency={concurrency}"
    ]  # fmt: skip
    subprocess.run(run_burst, env=_worker_env(), check=True)
    for start in range(0, count, 10_000):
        enqueue_many(noop, [((), {})] * min(10_000, count - start))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    subprocess.run(run_burst, env=_worker_env(), check=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)) FROM jobs_job "
            "WHERE state = 'succeeded' AND limit_name IS NULL"
        )
        done, span = cursor.fetchone()
    if done != count:
        raise RuntimeError(f"drain finished {done} of {count} unlimited jobs")
    return count / float(span)


def measure_pickup_beside_waiting(waiting: int, seconds: float) -> list[float]:
    """Milliseconds from just before enqueue to handler start of unrelated jobs on one
    worker, one after another (each waited for, 100 ms apart) for ``seconds``, while
    ``waiting`` jobs of the same queue wait on a concurrency limit of 1 whose slot is taken
    (by a job that never ends within the run, as behind a slow provider). The window is
    longer than a minute so that anything the waiting jobs cost on a timer shows too."""
    _truncate()
    if waiting:
        registry.ensure("default", LimitSpec.build("bench-one", concurrency=1), source="settings")
        options: Any = noop
        for start in range(0, waiting, 5_000):
            enqueue_many(options.using(limit="bench-one"), [((), {})] * min(5_000, waiting - start))
        with connection.cursor() as cursor:
            cursor.execute("UPDATE jobs_limit_state SET running = 1 WHERE limit_name = 'bench-one'")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--concurrency=1"],
        env=_worker_env(JOBS_POLL_INTERVAL="10"),
    )
    try:
        _wait_for(lambda: _count_workers() > 0, 20)
        time.sleep(0.5)
        latencies = []
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            before = time.time()
            result = stamp.enqueue()
            _wait_for(partial(_finished, result.id), 180)
            result.refresh()
            latencies.append((result.return_value - before) * 1000)
            time.sleep(0.1)
        return latencies
    finally:
        worker.terminate()
        worker.wait(30)
