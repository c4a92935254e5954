from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import layout_prototype as prototype


class Command(BaseCommand):
    help = (
        "Candidate layouts of the job table (lab/layouts/): WAL bytes, index entries and rates "
        "per job of one enqueue-claim-outcome cycle, each in a scratch database made from this "
        "database's schema (this database is only read)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=10_000, help="jobs per layout")
        parser.add_argument("--batch", type=int, default=100, help="jobs per claim and per outcome write")
        parser.add_argument("--heartbeats", type=int, default=2_000, help="jobs whose lease is extended once")
        parser.add_argument(
            "--layouts",
            default=",".join(prototype.LAYOUTS),
            help="comma-separated, of " + ", ".join(prototype.LAYOUTS),
        )
        parser.add_argument(
            "--payload", type=int, default=0, help="bytes of argument each job carries (default: none)"
        )
        parser.add_argument("--records", action="store_true", help="also the WAL records per job, by kind")

    def handle(self, *args: Any, **options: Any) -> None:
        layouts = [name.strip() for name in options["layouts"].split(",") if name.strip()]
        unknown = [name for name in layouts if name not in prototype.LAYOUTS]
        if unknown or not layouts:
            raise CommandError(f"unknown layout(s) {unknown}; the layouts are {', '.join(prototype.LAYOUTS)}")
        if options["jobs"] < 1 or options["batch"] < 1 or options["heartbeats"] < 1:
            raise CommandError("--jobs, --batch and --heartbeats must be at least 1")
        if options["payload"] < 0:
            raise CommandError("--payload must be 0 or more bytes")
        db = settings.DATABASES["default"]
        server = f"postgres://{db['USER'] or ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
        results = prototype.run(
            admin_dsn=f"{server}/postgres", source_dsn=f"{server}/{db['NAME']}",
            scratch=f"{db['NAME']}_layout", layouts=layouts, jobs=options["jobs"], batch=options["batch"],
            heartbeats=options["heartbeats"], payload=options["payload"], echo=self.stderr.write,
        )  # fmt: skip
        for line in prototype.table(results):
            self.stdout.write(line)
        if options["records"]:
            for line in prototype.records(results):
                self.stdout.write(line)
