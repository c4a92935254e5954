from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.conf import jobs_settings
from jobs.db import EX_CONFIG, DatabaseRefused, refuse_unusable_database
from jobs.scheduler import Scheduler, SchedulerConfig


class Command(BaseCommand):
    help = (
        "Turn due schedule slots into jobs. Any number may run at once: each slot fires once, "
        "decided by its fire record."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Fire what is due now, then exit (for cron or tests)."
        )
        parser.add_argument(
            "--max-sleep",
            type=float,
            default=None,
            help="Longest wait between passes, in seconds (default: JOBS['SCHEDULER_MAX_SLEEP']).",
        )
        parser.add_argument(
            "--no-listen", action="store_true", help="Do not LISTEN for schedule changes; poll only."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["max_sleep"] is not None and options["max_sleep"] <= 0:
            raise CommandError("--max-sleep must be positive")
        config = SchedulerConfig.from_settings(
            jobs_settings(),
            max_sleep=options["max_sleep"],
            listen=False if options["no_listen"] else None,
        )
        try:
            refuse_unusable_database()
        except DatabaseRefused as exc:
            raise CommandError(f"{exc}.", returncode=EX_CONFIG) from exc
        raise SystemExit(Scheduler(config).run(once=options["once"]))
