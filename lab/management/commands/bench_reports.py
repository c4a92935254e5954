from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import benchmark_reports as benchmark
from lab.management.bench import add_force_option, require_bench_database


class Command(BaseCommand):
    help = (
        "A customers report (rows/s, the executor's peak RSS) and a CSV import end to end with 2 "
        "executors (rows/s, their peak RSS), by real runworker processes (the job and reports tables "
        "of this database are emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rows", type=int, default=200_000, help="rows of the report (default 200,000)")
        parser.add_argument(
            "--import-rows", type=int, default=100_000, help="rows of the imported CSV (default 100,000)"
        )
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job and reports tables", suite="reports")
        if options["rows"] < 10 or options["import_rows"] < 1:
            raise CommandError("--rows must be at least 10 and --import-rows at least 1")
        figures = benchmark.run(
            report_rows=options["rows"], import_rows=options["import_rows"], echo=self.stderr.write
        )
        self.stdout.write(f"{'measure':<36}{'value':>14}")
        for key, value in figures.items():
            self.stdout.write(f"{key:<36}{value:>14,.1f}")
