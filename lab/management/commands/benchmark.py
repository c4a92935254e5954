import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import benchmark
from lab.management.bench import add_force_option, require_bench_database


class Command(BaseCommand):
    help = "Measure enqueue rates, drain rates and pickup latency on this database (it is emptied)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=3)
        parser.add_argument("--single", type=int, default=5_000, help="jobs enqueued one by one")
        parser.add_argument("--bulk", type=int, default=100_000, help="jobs enqueued in bulk")
        parser.add_argument("--drain", type=int, default=20_000, help="jobs drained per measurement")
        parser.add_argument("--pickup", type=int, default=200, help="pickup latency samples")
        parser.add_argument(
            "--memory",
            type=int,
            default=100_000,
            help="jobs run by one executor for the memory check (once; at least 1000, or 0 to skip it)",
        )
        parser.add_argument("--json", default="bench-results/latest.json", help="where to write results")
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if 0 < options["memory"] < benchmark.MEMORY_MARK:
            # The check samples the executor after its first 1,000 jobs, then after all of them.
            raise CommandError(
                f"--memory takes at least {benchmark.MEMORY_MARK} jobs, or 0 to skip the memory check"
            )
        require_bench_database(options, empties="the job table", suite="core")
        report = benchmark.run(
            runs=options["runs"],
            single=options["single"],
            bulk=options["bulk"],
            drain=options["drain"],
            pickup=options["pickup"],
            memory=options["memory"],
            echo=lambda line: self.stderr.write(line),
        )
        medians = report.medians()
        self.stdout.write(f"{'measure':<34}{'median':>12}   runs")
        for key, value in medians.items():
            runs = ", ".join(f"{v:,.1f}" for v in report.figures[key])
            self.stdout.write(f"{key:<34}{value:>12,.1f}   {runs}")
        path = Path(options["json"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"medians": medians, "runs": report.figures, **report.notes}, indent=2))
        self.stdout.write(f"written to {path}")
