"""Candidate layouts of the job table, measured by the WAL one job's life writes.

Each layout gets a scratch database of its own, made from the schema of a migrated database
(``pg_dump -s``: today's columns, indexes, triggers and functions) and then changed by its
steps in LAYOUTS (files in lab/layouts/, their ``schema`` section; a column order; a
fillfactor). The same cycle runs on each, on one
connection, one statement per transaction as the worker and the enqueuer send them: enqueue
N no-op jobs one by one, then claim them in batches (FOR UPDATE SKIP LOCKED) and record a
batch of outcomes after each claim. A second, smaller run extends the leases of claimed jobs
before their outcomes, as the heartbeat of a long job does. Layouts without statements of
their own run the engine's (jobs/sql/: insert_plain, claim_plain, extend_leases,
record_outcomes), so A and B measure what the worker sends today.

Figures per job and stage: WAL bytes (from the log, lab/wal.py), full-page images apart,
index entries written, heap records, and jobs/s (noisy on a shared machine; the bytes are
not). Run by ``manage.py bench_layout`` (``scripts/bench layout``).
"""

from __future__ import annotations

import bisect
import importlib
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from jobs.ids import uuid7
from jobs.store.outcomes import record_statement
from lab import wal
from lab.wal import Wal

# The migration that put the columns in their order, and can put them back.
COLUMN_ORDER = importlib.import_module("jobs.migrations.0021_job_column_order")
# An alternative to 0021's order, measured beside it: the columns every claim reads (queue,
# priority, limit, expiry) first, then those the transitions change, then the rest. The
# same WAL within 1%, but a heartbeat logs 30 bytes more.
READ_FIRST_ORDER = (
    # Read by every claim and by the count triggers, never changed.
    "id", "queue_name", "priority", "limit_name", "expires_at",
    # Changed by the claim only.
    "attempt", "worker_ids", "started_at", "last_attempted_at",
    # Changed by the claim and the outcome (the start mark and the heartbeat change the last
    # two), then by the outcome only.
    "state", "worker_id", "lease_expires_at", "started_attempt", "finished_at", "result",
    # Changed now and then: a retry's time, a failed attempt, progress, a cancel request, a
    # replay's edits, a handback, a dedupe window's end, a limit.
    "run_at", "last_error", "errors", "progress", "cancel_requested_at", "edits", "handbacks",
    "dedupe_lapsed", "limit_reserved", "limit_wait",
    # Written once, at the enqueue.
    "created_at", "task_path", "args", "kwargs", "max_attempts", "timeout", "lease_seconds",
    "dedupe_key", "dedupe_until", "trace_id", "backoff_base", "backoff_cap", "owner", "public",
    "jitter", "non_retryable", "soft_timeout", "limit_key", "workflow_node", "workflow_position",
)  # fmt: skip

HERE = Path(__file__).resolve().parent
ENGINE_SQL = HERE.parent / "jobs" / "sql"
LAYOUT_SQL = HERE / "layouts"

# Each layout: the steps applied, in order, to today's schema (since
# jobs/migrations/0021_job_column_order.py its job table has the columns the transitions
# change at the end of the row, and pages filled to 50%). A step is a file of lab/layouts/,
# "previous_order" (the columns as before 0021, pages at 70%: that migration's reverse),
# "read_first_order" (READ_FIRST_ORDER, pages at 50%) or "fillfactor=N". P70 is the table
# before 0021, P100 before 0018 (pages filled to 100%), B today's with running rows indexed
# by lease expiry, as before 0020.
LAYOUTS: dict[str, list[str]] = {
    "A": [],
    "A70": ["fillfactor=70"],
    "F": ["read_first_order"],
    "P50": ["previous_order", "fillfactor=50"],
    "P70": ["previous_order"],
    "P100": ["previous_order", "fillfactor=100"],
    "B": ["lease_by_expiry"],
    "C": ["c_split"],
    "D": ["d_ready"],
}
# The engine's statement for each step of the cycle.
ENGINE = {
    "enqueue": "insert_plain",
    "claim": "claim_plain",
    "heartbeat": "extend_leases",
    "outcome": "record_outcomes",
}
STAGES = ("enqueue", "claim", "outcome")
TASK = "lab.benchmark.noop"


def sections(name: str) -> dict[str, str]:
    """The ``-- name: x`` sections of lab/layouts/<name>.sql."""
    parts = re.split(r"^-- name: (\w+)\n", (LAYOUT_SQL / f"{name}.sql").read_text(), flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def schema_statements(step: str) -> list[str]:
    """What one step of a layout runs on its scratch database."""
    if step == "previous_order":
        return COLUMN_ORDER.rewrite_sql(COLUMN_ORDER.PREVIOUS_ORDER, COLUMN_ORDER.PREVIOUS_FILLFACTOR)
    if step == "read_first_order":
        return COLUMN_ORDER.rewrite_sql(READ_FIRST_ORDER, COLUMN_ORDER.FILLFACTOR)
    if fill := re.fullmatch(r"fillfactor=(\d+)", step):
        return [f"ALTER TABLE jobs_job SET (fillfactor = {int(fill[1])})"]
    return [sections(step)["schema"]]


def statements(files: list[str]) -> dict[str, str]:
    found = {step: (ENGINE_SQL / f"{name}.sql").read_text() for step, name in ENGINE.items()}
    # The outcome as the engine writes a batch that holds no workflow step.
    found["outcome"] = record_statement(steps=False)
    for name in files:
        if (LAYOUT_SQL / f"{name}.sql").exists():
            found.update({k: v for k, v in sections(name).items() if k in ENGINE})
    return found


@dataclass
class Measure:
    jobs: int
    wal: dict[str, Wal] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    heartbeats: int = 0
    row_bytes: dict[str, float] = field(default_factory=dict)
    table_bytes: int = 0
    index_bytes: int = 0

    def total(self) -> Wal:
        out = Wal()
        for stage in STAGES:
            out = out.add(self.wal[stage])
        return out


def make_database(admin_dsn: str, name: str, schema: str, files: list[str]) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    target = admin_dsn.rsplit("/", 1)[0] + f"/{name}"
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", target, "-f", "-"],
        input=schema,
        text=True,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with psycopg.connect(target, autocommit=True) as conn:
        for step in files:
            for statement in schema_statements(step):
                conn.execute(statement)


def dump_schema(source_dsn: str) -> str:
    return subprocess.run(
        ["pg_dump", "-s", "--no-owner", "--no-privileges", "-d", source_dsn],
        text=True, check=True, capture_output=True,
    ).stdout  # fmt: skip


def _enqueue_params(payload: int = 0) -> dict[str, Any]:
    """One no-op job's insert; ``payload`` bytes of argument (one string), or none."""
    args = json.dumps(["x" * payload]) if payload else "[]"
    return {
        "id": uuid7(), "task_path": TASK, "queue_name": "default", "priority": 0, "args": args,
        "kwargs": "{}", "max_attempts": 3, "trace_id": "", "notify": True, "checked": True,
    }  # fmt: skip


def _claim_params(worker: uuid.UUID, batch: int) -> dict[str, Any]:
    return {
        "queues": ["default"], "quotas": [batch], "limit": batch, "worker": worker, "now": None,
        "lease_seconds": 300.0, "default_timeout": None, "unstarted_lease": 10.0,
    }  # fmt: skip


def _outcome_params(worker: uuid.UUID, claimed: list[tuple[Any, int]]) -> dict[str, Any]:
    outcomes = [
        {"id": str(job_id), "attempt": attempt, "in_workflow": False, "state": "succeeded", "result": None}
        for job_id, attempt in claimed
    ]
    return {
        "outcomes": json.dumps(outcomes), "started": "[]", "worker": worker, "now": None,
        "lease_seconds": 300.0,
    }  # fmt: skip


def cycle(
    dsn: str, sql: dict[str, str], *, jobs: int, batch: int, heartbeats: int, payload: int = 0
) -> Measure:
    """Enqueue ``jobs`` one per transaction, then drain them: claim a batch, record its
    outcomes. Then ``heartbeats`` jobs claimed, their leases extended, their outcomes recorded."""
    measure = Measure(jobs=jobs)
    spans: list[tuple[int, int, str]] = []
    worker = uuid.uuid4()
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        if not wal.available(cur):
            raise RuntimeError("the server has no pg_walinspect (PostgreSQL 15 contrib)")
        wal.hold(cur)

        def step(stage: str, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            before = wal.position(cur)
            started = time.perf_counter()
            cur.execute(statement, params)
            rows = cur.fetchall() if cur.description else []
            measure.seconds[stage] = measure.seconds.get(stage, 0.0) + time.perf_counter() - started
            spans.append((before, wal.position(cur), stage))
            return rows

        for _ in range(jobs):
            step("enqueue", sql["enqueue"], _enqueue_params(payload))
        cur.execute("ANALYZE")
        drain(step, sql, worker, batch)
        for _ in range(heartbeats):
            step("hb_enqueue", sql["enqueue"], _enqueue_params(payload))
        drain(step, sql, worker, batch, heartbeat=True)
        measure.heartbeats = heartbeats
        measure.row_bytes = row_sizes(cur)
        measure.table_bytes, measure.index_bytes = disk_sizes(cur)
        rows = wal.records(cur, spans[0][0], spans[-1][1])
    starts = [row[0] for row in rows]
    for begin, end, stage in spans:
        part = rows[bisect.bisect_left(starts, begin) : bisect.bisect_left(starts, end)]
        measure.wal[stage] = measure.wal.get(stage, wal.Wal()).add(wal.summarise(part))
    return measure


def drain(
    step: Callable[[str, str, dict[str, Any]], list[tuple[Any, ...]]],
    sql: dict[str, str],
    worker: uuid.UUID,
    batch: int,
    *,
    heartbeat: bool = False,
) -> None:
    prefix = "hb_" if heartbeat else ""
    while True:
        claimed = [
            (row[0], row[4]) for row in step(f"{prefix}claim", sql["claim"], _claim_params(worker, batch))
        ]
        if not claimed:
            return
        if heartbeat:
            ids = [job_id for job_id, _ in claimed]
            step("heartbeat", sql["heartbeat"], {
                "ids": ids, "tokens": [worker] * len(ids), "now": None, "lease_seconds": 300.0,
            })  # fmt: skip
        step(f"{prefix}outcome", sql["outcome"], _outcome_params(worker, claimed))


def _job_tables(cur: Any) -> list[str]:
    """The layout's job tables (jobs_job and any table split from it)."""
    cur.execute(
        "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'jobs\\_job%%' "
        "AND relnamespace = 'public'::regnamespace ORDER BY 1"
    )
    return [table for (table,) in cur.fetchall()]


def row_sizes(cur: Any) -> dict[str, float]:
    """Average bytes of a finished row in each job table of the layout."""
    sizes = {}
    for table in _job_tables(cur):
        cur.execute(f'SELECT avg(pg_column_size(t.*)) FROM "{table}" t')
        value = cur.fetchone()[0]
        if value is not None:
            sizes[table] = float(value)
    return sizes


def disk_sizes(cur: Any) -> tuple[int, int]:
    """Bytes on disk of the layout's job tables and of their indexes, as the drain left them
    (no VACUUM: what page pruning and the fillfactor did on their own)."""
    cur.execute(
        "SELECT coalesce(sum(pg_table_size(t::regclass)), 0), coalesce(sum(pg_indexes_size(t::regclass)), 0)"
        " FROM unnest(%s::text[]) AS t",
        [_job_tables(cur)],
    )
    table_bytes, index_bytes = cur.fetchone()
    return int(table_bytes), int(index_bytes)


def run(
    *, admin_dsn: str, source_dsn: str, scratch: str, layouts: list[str], jobs: int, batch: int,
    heartbeats: int, echo: Callable[[str], None], payload: int = 0,
) -> dict[str, Measure]:  # fmt: skip
    schema = dump_schema(source_dsn)
    results = {}
    target = admin_dsn.rsplit("/", 1)[0] + f"/{scratch}"
    try:
        for name in layouts:
            echo(f"layout {name}")
            make_database(admin_dsn, scratch, schema, LAYOUTS[name])
            results[name] = cycle(
                target, statements(LAYOUTS[name]), jobs=jobs, batch=batch, heartbeats=heartbeats,
                payload=payload,
            )  # fmt: skip
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{scratch}"')
    return results


def table(results: dict[str, Measure]) -> list[str]:
    """The figures per layout, one line each."""
    head = (
        f"{'layout':<6}{'WAL B/job':>10}{'enqueue':>9}{'claim':>7}{'outcome':>8}{'FPI':>6}"
        f"{'idx/job':>8}{'heap/job':>9}{'hb B/job':>9}{'enq/s':>8}{'drain/s':>9}"
        f"{'disk B/job':>11}{'idx B/job':>10}  row bytes"
    )
    lines = [head]
    for name, m in results.items():
        total = m.total()
        heap = sum(n for kind, n in total.records.items() if kind.startswith(("Heap/", "Heap2/")))
        hb = m.wal.get("heartbeat", wal.Wal()).without_fpi / max(m.heartbeats, 1)
        drain_s = m.seconds["claim"] + m.seconds["outcome"]
        done = m.jobs + m.heartbeats
        rows = ", ".join(f"{t} {b:.0f}" for t, b in m.row_bytes.items())
        per_job = [
            total.without_fpi, m.wal["enqueue"].without_fpi, m.wal["claim"].without_fpi,
            m.wal["outcome"].without_fpi, total.fpi_bytes,
        ]  # fmt: skip
        widths = (10, 9, 7, 8, 6)
        lines.append(
            f"{name:<6}"
            + "".join(f"{value / m.jobs:>{width}.0f}" for value, width in zip(per_job, widths, strict=True))
            + f"{total.index_entries / m.jobs:>8.2f}{heap / m.jobs:>9.2f}{hb:>9.0f}"
            + f"{m.jobs / m.seconds['enqueue']:>8.0f}{m.jobs / drain_s:>9.0f}"
            + f"{m.table_bytes / done:>11.0f}{m.index_bytes / done:>10.0f}  {rows}"
        )
    return lines


def records(results: dict[str, Measure]) -> list[str]:
    """The WAL records per job of each layout and stage, by kind (count per job x average
    bytes without full-page images; kinds under 0.05 per job left out)."""
    lines = []
    for name, m in results.items():
        for stage in (*STAGES, "heartbeat"):
            count = m.heartbeats if stage == "heartbeat" else m.jobs
            if stage not in m.wal or not count:
                continue
            part = m.wal[stage]
            kinds = ", ".join(
                f"{k} {n / count:.2f}x{part.kind_bytes[k] / n:.0f}B"
                for k, n in sorted(part.records.items())
                if n / count >= 0.05
            )
            lines.append(f"{name:<6}{stage:<10}{kinds}")
    return lines
