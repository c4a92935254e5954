from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from jobs.workflows import benchmark


class Command(BaseCommand):
    help = (
        "Workflow fan-out: time to enqueue a chord of N members, and to drain and join it with "
        "runworker, against N plain jobs (the job and workflow tables of this database are emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1)
        parser.add_argument("--members", type=int, default=10_000, help="members of the group")
        parser.add_argument("--concurrency", type=int, default=2, help="executor processes of the worker")
        parser.add_argument(
            "--force", action="store_true", help="run even if the database name lacks 'bench'"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = connection.settings_dict["NAME"]
        if "bench" not in name and not options["force"]:
            raise CommandError(
                f"the workflow benchmark empties the job and workflow tables; database {name!r} does not "
                "look like a benchmark database (use scripts/bench workflows, or --force)"
            )
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
