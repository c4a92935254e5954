"""Workflow fan-out: enqueue a chord of N no-op members (one COPY for the members), then let
real ``runworker`` processes drain it and join; the same N plain jobs drained for reference.

Run through ``scripts/bench workflows`` (a dedicated database; its job and workflow tables
are emptied).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from django.db import connection, transaction
from django.tasks import task

from jobs.backend import enqueue_many
from jobs.workflows import Workflow, chord, group, step

from .benchmark import ROOT, _worker_env, noop


@task
def count(values: list[object]) -> int:
    """The chord's callback: how many results it was given."""
    return len(values)


def _truncate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job, jobs_workflow, jobs_workflow_node, jobs_workflow_signal")
        cursor.execute("VACUUM ANALYZE jobs_job")


def _drain(concurrency: int) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", f"--concurrency={concurrency}"],
        env=_worker_env(),
        check=True,
    )
    return time.perf_counter() - started


def _span() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM jobs_job")
        return float(cursor.fetchone()[0])


def measure_fanout(members: int, concurrency: int) -> dict[str, float]:
    _truncate()
    started = time.perf_counter()
    with transaction.atomic():
        run = chord(group(*(step(noop) for _ in range(members))), step(count)).enqueue(name="bench")
    enqueue = time.perf_counter() - started
    wall = _drain(concurrency)
    run.refresh()
    if run.status != "succeeded" or run.result != members:
        raise RuntimeError(f"the fan-out ended {run.status} with {run.result!r}, not {members}")
    callbacks = sum(1 for n in Workflow(run.id).steps() if n.label.endswith(".count"))
    if callbacks != 1:
        raise RuntimeError(f"{callbacks} callbacks for one chord")
    return {"enqueue_s": enqueue, "join_drain_s": _span(), "join_drain_wall_s": wall}


def measure_plain(members: int, concurrency: int) -> dict[str, float]:
    _truncate()
    started = time.perf_counter()
    with transaction.atomic():
        for start in range(0, members, 10_000):
            enqueue_many(noop, [((), {})] * min(10_000, members - start))
    enqueue = time.perf_counter() - started
    wall = _drain(concurrency)
    return {"plain_enqueue_s": enqueue, "plain_drain_s": _span(), "plain_drain_wall_s": wall}


def run(*, runs: int, members: int, concurrency: int, echo: Callable[[str], None]) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    for number in range(1, runs + 1):
        echo(f"run {number}/{runs}")
        for measure in (measure_fanout, measure_plain):
            for key, value in measure(members, concurrency).items():
                figures.setdefault(key, []).append(value)
    return figures


def medians(figures: dict[str, list[float]]) -> dict[str, float]:
    return {key: statistics.median(values) for key, values in figures.items()}
