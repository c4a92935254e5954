from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import benchmark_workflows as benchmark
from lab.management.bench import add_force_option, require_bench_database


class Command(BaseCommand):
    help = (
        "Workflow fan-out: time to enqueue a chord of N members, and to drain and join it with "
        "runworker, against N plain jobs (the job and workflow tables of this database are emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1)
        parser.add_argument("--members", type=int, default=10_000, help="members of the group")
        parser.add_argument("--concurrency", type=int, default=2, help="executor processes of the worker")
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job and workflow tables", suite="workflows")
        if options["runs"] < 1 or options["members"] < 1 or options["concurrency"] < 1:
            raise CommandError("--runs, --members and --concurrency must be at least 1")
        figures = benchmark.run(
            runs=options["runs"], members=options["members"], concurrency=options["concurrency"],
            echo=self.stderr.write,
        )  # fmt: skip
        members = options["members"]
        self.stdout.write(f"{'measure (' + f'{members:,}' + ' members)':<34}{'median':>10}   runs")
        for key, value in benchmark.medians(figures).items():
            runs = ", ".join(f"{v:.2f}" for v in figures[key])
            self.stdout.write(f"{key:<34}{value:>10.2f}   {runs}")
