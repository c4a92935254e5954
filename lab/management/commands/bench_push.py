from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import benchmark_push as benchmark
from lab.management.bench import add_force_option, require_bench_database


class Command(BaseCommand):
    help = (
        "Pushes per second to a no-op APNs on loopback, drained by runworker with 1 and 2 executor "
        "processes (the push and job tables of this database are emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=3)
        parser.add_argument(
            "--count", type=int, default=5_000, help="devices (one push each) per measurement"
        )
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job and push tables", suite="push")
        if options["runs"] < 1 or options["count"] < 1:
            raise CommandError("--runs and --count must be at least 1")
        figures = benchmark.run(runs=options["runs"], count=options["count"], echo=self.stderr.write)
        self.stdout.write(f"{'measure':<30}{'median':>12}   runs")
        for key, value in benchmark.medians(figures).items():
            runs = ", ".join(f"{v:,.0f}" for v in figures[key])
            self.stdout.write(f"{key:<30}{value:>12,.0f}   {runs}")
