import statistics
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from lab import benchmark, benchmark_limits
from lab.management.bench import add_force_option, require_bench_database

PARTS = ("drain", "rate", "pickup")


class Command(BaseCommand):
    help = (
        "Limits: throughput of a rate-limited backlog against its limit (2 runworker processes), "
        "the drain rate of unlimited jobs with and without limited jobs waiting beside them, and "
        "the pickup latency of unrelated jobs with and without jobs waiting on a concurrency "
        "limit (this database is emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rate", default="100/s", help="the limit of the rate-limited run")
        parser.add_argument("--seconds", type=float, default=30.0, help="measured window of that run")
        parser.add_argument("--drain", type=int, default=20_000, help="unlimited jobs per drain")
        parser.add_argument("--runs", type=int, default=3, help="drain runs (median)")
        parser.add_argument(
            "--waiting", type=int, default=20_000, help="jobs waiting on a concurrency of 1 in the pickup run"
        )
        parser.add_argument(
            "--pickup-seconds", type=float, default=75.0, help="window of each pickup run (over a minute)"
        )
        parser.add_argument(
            "--parts", default=",".join(PARTS), help=f"which measures, comma-separated ({', '.join(PARTS)})"
        )
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job table", suite="limits")
        parts = set(options["parts"].split(","))
        rows: list[tuple[str, float, list[float]]] = []
        if "drain" in parts:
            alone, beside = [], []
            for run in range(options["runs"]):
                self.stderr.write(f"drain run {run + 1}/{options['runs']}")
                alone.append(benchmark.measure_drain(options["drain"], 2)[0])
                beside.append(benchmark_limits.measure_drain_beside_limits(options["drain"], 2))
            rows += [
                ("drain unlimited, 2 executors, jobs/s", statistics.median(alone), alone),
                ("  same, 5,000 jobs of 100 keys waiting on limits", statistics.median(beside), beside),
            ]
        if "rate" in parts:
            self.stderr.write(f"rate-limited run ({options['rate']}, {options['seconds']:.0f} s)")
            limited = benchmark_limits.measure_rate_limited(
                options["rate"], options["seconds"], workers=2, concurrency=2
            )
            rows += [
                (f"rate-limited {options['rate']}, 2 workers x 2, jobs/s", limited["per_s"], []),
                ("  busiest 1-second window, jobs", limited["busiest_1s_window"], []),
            ]
        if "pickup" in parts:
            for waiting in (0, options["waiting"]):
                self.stderr.write(f"pickup run, {waiting:,} waiting ({options['pickup_seconds']:.0f} s)")
                latencies = benchmark_limits.measure_pickup_beside_waiting(waiting, options["pickup_seconds"])
                rows += [
                    (f"pickup of other work, {waiting:,} waiting on a limit, p50 ms",
                     benchmark.percentile(latencies, 50), []),
                    ("  p99 ms", benchmark.percentile(latencies, 99), []),
                    ("  jobs picked up in the window", float(len(latencies)), []),
                ]  # fmt: skip
        width = max([46] + [len(name) + 2 for name, _, _ in rows])
        self.stdout.write(f"{'measure':<{width}}{'value':>10}   runs")
        for name, value, runs in rows:
            shown = ", ".join(f"{v:,.0f}" for v in runs) if runs else ""
            self.stdout.write(f"{name:<{width}}{value:>10,.1f}   {shown}")
