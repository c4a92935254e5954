import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from lab.fleet import Round


class Command(BaseCommand):
    help = (
        "Many worker hosts against one PostgreSQL: for each host count, drain the same jobs "
        "(optionally killing one whole host part-way), report throughput and CPU shares, check "
        "every side effect happened once (empties the job table)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hosts", default="1,2,4,8", help="host counts to run, comma-separated")
        parser.add_argument("--executors", type=int, default=2, help="executor processes per host")
        parser.add_argument("--jobs", type=int, default=20000)
        parser.add_argument("--millis", type=float, default=0.0, help="each job sleeps this long")
        parser.add_argument(
            "--no-effects", action="store_true", help="handlers do nothing (no side-effect commit each)"
        )
        parser.add_argument("--kill", action="store_true", help="SIGKILL one whole host part-way")
        parser.add_argument("--timeout", type=float, default=300)
        parser.add_argument(
            "--force", action="store_true", help="run even if the database name lacks 'fleet'"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = connection.settings_dict["NAME"]
        if "fleet" not in name and not options["force"]:
            raise CommandError(f"the drill empties the job table; use scripts/fleet, not database {name!r}")
        try:
            counts = [int(n) for n in options["hosts"].split(",")]
        except ValueError:
            raise CommandError(
                f"--hosts takes host counts such as 1,2,4,8, not {options['hosts']!r}"
            ) from None
        if not counts or min(counts) < 1 or options["executors"] < 1 or options["jobs"] < 1:
            raise CommandError("host counts, --executors and --jobs must be at least 1")
        results = []
        ok = True
        for hosts in counts:
            self.stderr.write(
                f"==> {hosts} host(s) x {options['executors']} executor(s), {options['jobs']} jobs"
            )
            result = Round(
                hosts=hosts,
                executors=options["executors"],
                jobs=options["jobs"],
                millis=options["millis"],
                kill=options["kill"],
                effects=not options["no_effects"],
                echo=self.stderr.write,
            ).run(options["timeout"])
            results.append(result)
            ok = ok and result["lost"] == 0 and result["extra_runs"] <= result["in_flight_at_kills"]
        self.stdout.write(json.dumps(results, indent=2))
        self.stdout.write("")
        self.stdout.write(
            "| hosts | executors | jobs/s | PostgreSQL CPU | hosts' CPU | WAL flushes/s | lost | ran twice |"
        )
        self.stdout.write("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:
            self.stdout.write(
                f"| {r['hosts']} | {r['hosts'] * r['executors_per_host']} | {r['jobs_per_second']:,} "
                f"| {r['postgres_cpu_share']:.0%} | {r['hosts_cpu_share']:.0%} "
                f"| {r['wal_syncs_per_second']:,} | {r['lost']} | {r['ran_twice']} |"
            )
        self.stdout.write(
            "PASS: every job's side effect once; reruns only of jobs in flight on killed hosts"
            if ok
            else "FAIL"
        )
        if not ok:
            raise SystemExit(1)
