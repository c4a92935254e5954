import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from lab.chaos import Drill


class Command(BaseCommand):
    help = (
        "Chaos drill: kill workers at random and restart PostgreSQL while jobs run (empties the job table)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=5000)
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--concurrency", type=int, default=2)
        parser.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 5.0), metavar=("MIN", "MAX"))
        parser.add_argument("--no-postgres-restart", action="store_true")
        parser.add_argument("--timeout", type=float, default=600)
        parser.add_argument(
            "--force", action="store_true", help="run even if the database name lacks 'chaos'"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = connection.settings_dict["NAME"]
        if "chaos" not in name and not options["force"]:
            raise CommandError(f"the drill empties the job table; use scripts/chaos, not database {name!r}")
        drill = Drill(
            jobs=options["jobs"],
            workers=options["workers"],
            concurrency=options["concurrency"],
            kill_every=tuple(options["kill_every"]),
            restart_postgres=not options["no_postgres_restart"],
            echo=lambda line: self.stderr.write(line),
        )
        result = drill.run(options["timeout"])
        self.stdout.write(json.dumps(result, indent=2))
        ok = result["lost"] == 0 and result["duplicates"] <= result["in_flight_at_kills"]
        self.stdout.write("PASS: 0 lost, duplicates within jobs in flight at kills" if ok else "FAIL")
        if not ok:
            raise SystemExit(1)
