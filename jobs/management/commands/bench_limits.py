import statistics
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobs import benchmark
from jobs.management.bench import add_force_option, require_bench_database


class Command(BaseCommand):
    help = (
        "Limits: throughput of a rate-limited backlog against its limit (2 runworker processes), "
        "and the drain rate of unlimited jobs with and without limited jobs waiting beside them "
        "(this database is emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rate", default="100/s", help="the limit of the rate-limited run")
        parser.add_argument("--seconds", type=float, default=30.0, help="measured window of that run")
        parser.add_argument("--drain", type=int, default=20_000, help="unlimited jobs per drain")
        parser.add_argument("--runs", type=int, default=3, help="drain runs (median)")
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job table", suite="limits")
        alone, beside = [], []
        for run in range(options["runs"]):
            self.stderr.write(f"drain run {run + 1}/{options['runs']}")
            alone.append(benchmark.measure_drain(options["drain"], 2)[0])
            beside.append(benchmark.measure_drain_beside_limits(options["drain"], 2))
        self.stderr.write(f"rate-limited run ({options['rate']}, {options['seconds']:.0f} s)")
        limited = benchmark.measure_rate_limited(
            options["rate"], options["seconds"], workers=2, concurrency=2
        )
        rows = [
            (f"rate-limited {options['rate']}, 2 workers x 2, jobs/s", limited["per_s"], ""),
            ("  busiest 1-second window, jobs", limited["busiest_1s_window"], ""),
            ("drain unlimited, 2 executors, jobs/s", statistics.median(alone), alone),
            ("  same, 5,000 jobs of 100 keys waiting on limits", statistics.median(beside), beside),
        ]
        self.stdout.write(f"{'measure':<46}{'median':>10}   runs")
        for name, value, runs in rows:
            shown = ", ".join(f"{v:,.0f}" for v in runs) if runs else ""
            self.stdout.write(f"{name:<46}{value:>10,.1f}   {shown}")
