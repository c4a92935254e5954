"""Claim latency on a big table: the queue alone (finished jobs pruned) versus the same queue
beside millions of finished rows, generated in the database with generate_series.

    scripts/bench scale [--finished 10000000] [--time-box 240]

Runs on the benchmark database only (it is emptied). The finished rows are copies of one
real finished job (every column the engine writes, with fresh ids and spread finish times),
inserted in chunks until ``--finished`` rows or ``--time-box`` seconds, whichever comes
first; the figure says how many made it.
"""

import json
import statistics
import time
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from jobs import store
from jobs.backend import enqueue_many
from jobs.db import connect
from lab.benchmark import noop

CHUNK = 500_000


class Command(BaseCommand):
    help = "Claim p50/p99 with the finished jobs pruned versus with millions of them (empties the job table)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--finished", type=int, default=10_000_000, help="finished rows to generate")
        parser.add_argument("--time-box", type=float, default=240.0, help="seconds for generating them")
        parser.add_argument("--claims", type=int, default=2000, help="claims measured per setting")
        parser.add_argument("--keep", action="store_true", help="leave the generated rows in place")

    def handle(self, *args: Any, **options: Any) -> None:
        name = connection.settings_dict["NAME"]
        if "bench" not in name:
            raise CommandError(
                f"bench_scale empties the job table; use scripts/bench scale, not database {name!r}"
            )
        if options["finished"] < 0 or options["claims"] < 1:
            raise CommandError("--finished must be 0 or more and --claims at least 1")
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE jobs_job")
        template = self._finished_template()
        results: dict[str, Any] = {"pruned": self._measure(options["claims"])}
        made, seconds = self._generate(template, options["finished"], options["time_box"])
        self.stderr.write(f"generated {made:,} finished rows in {seconds:.0f}s; vacuum analyze")
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE) jobs_job")
            cursor.execute("SELECT pg_total_relation_size('jobs_job')")
            (size,) = cursor.fetchone()
        results["finished_rows"] = made
        results["generate_seconds"] = round(seconds, 1)
        results["vacuum_seconds"] = round(time.monotonic() - started, 1)
        results["table_and_indexes_mb"] = round(size / 2**20)
        results["with_finished"] = self._measure(options["claims"])
        if not options["keep"]:
            # Pruned again, all at once (a dropped partition would be as quick).
            started = time.monotonic()
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE jobs_job")
            results["truncate_seconds"] = round(time.monotonic() - started, 2)
            self._finished_template()
            results["pruned_again"] = self._measure(options["claims"])
        self.stdout.write(json.dumps(results, indent=2))
        line = ", ".join(
            f"{label} {results[key]['p50_ms']}/{results[key]['p99_ms']} ms "
            f"({results[key]['buffers_per_claim']} buffers)"
            for key, label in (
                ("pruned", "pruned"),
                ("with_finished", f"with {made:,} finished rows"),
                ("pruned_again", "pruned again"),
            )
            if key in results
        )
        self.stdout.write(f"claim p50/p99: {line}")

    def _finished_template(self) -> uuid.UUID:
        (result,) = enqueue_many(noop, [((), {})])
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE jobs_job SET state = 'succeeded', attempt = 1, started_at = now(), "
                "last_attempted_at = now(), finished_at = now(), result = 'null', trace_id = %s "
                "WHERE id = %s",
                [uuid.uuid4().hex, result.id],
            )
        return uuid.UUID(result.id)

    def _generate(self, template: uuid.UUID, count: int, time_box: float) -> tuple[int, float]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'jobs_job' AND table_schema = current_schema() ORDER BY ordinal_position"
            )
            columns = [row[0] for row in cursor.fetchall()]
        spread = {
            "id": "gen_random_uuid()",
            # Spread over the retention window, oldest first, as a busy week would leave them.
            "created_at": "now() - (g * interval '50 ms')",
            "run_at": "now() - (g * interval '50 ms')",
            "started_at": "now() - (g * interval '50 ms')",
            "last_attempted_at": "now() - (g * interval '50 ms')",
            "finished_at": "now() - (g * interval '50 ms')",
        }
        select = ", ".join(spread.get(column, f"t.{column}") for column in columns)
        statement = (
            f"INSERT INTO jobs_job ({', '.join(columns)}) SELECT {select} "
            "FROM jobs_job t, generate_series(%s::bigint, %s::bigint) g WHERE t.id = %s"
        )
        made, started = 0, time.monotonic()
        while made < count and time.monotonic() - started < time_box:
            size = min(CHUNK, count - made)
            with connection.cursor() as cursor:
                cursor.execute(statement, [made + 1, made + size, template])
            made += size
            self.stderr.write(f"  {made:,} finished rows ({time.monotonic() - started:.0f}s)")
        return made, time.monotonic() - started

    def _measure(self, claims: int) -> dict[str, Any]:
        """Claim one job at a time, as an executor with slow jobs does, ``claims`` times."""
        enqueue_many(noop, [((), {}) for _ in range(claims + 100)])
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE jobs_job")
            # Not measured while the writes so far are being flushed.
            cursor.execute("CHECKPOINT")
        worker = uuid.uuid4()
        timings = []
        with connect(application_name="jobs-bench-scale") as conn:
            worker_cursor = conn.cursor()
            for _ in range(claims):
                started = time.perf_counter()
                claimed = store.claim(worker_cursor, worker=worker, queues=["default"], limit=1)
                timings.append((time.perf_counter() - started) * 1000)
                assert claimed, "the queue ran dry"
            # What one more claim reads, whatever the machine's load: shared buffers, and
            # whether it went through the claim's partial index.
            worker_cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store.sql("claim"),
                {
                    "queues": ["default"], "quotas": [1], "limit": 1, "worker": worker, "now": None,
                    "lease_seconds": 300.0, "default_timeout": None, "unstarted_lease": 10.0,
                },
            )  # fmt: skip
            row = worker_cursor.fetchone()
            assert row is not None
            plan = row[0][0]["Plan"]
        with connection.cursor() as cursor:
            # The claimed rows and the rest of the queue go; the finished rows stay.
            cursor.execute("DELETE FROM jobs_job WHERE state IN ('queued', 'running')")
        timings.sort()
        return {
            "claims": claims,
            "p50_ms": round(statistics.median(timings), 2),
            "p99_ms": round(timings[int(len(timings) * 0.99) - 1], 2),
            "buffers_per_claim": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
            "uses_claim_index": "jobs_job_claimable" in json.dumps(plan),
        }
