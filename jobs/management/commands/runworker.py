from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.conf import jobs_settings
from jobs.worker import QueueSpecError, WorkerConfig, parse_queues, run_worker


class Command(BaseCommand):
    help = "Run jobs: a supervisor process with --concurrency executor processes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            default=None,
            help="Queues with weights, e.g. 'email:6,default:3,low:1' (default: all "
            "configured queues, weight 1).",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="Strict priority: always drain earlier queues first instead of weighting.",
        )
        parser.add_argument(
            "--concurrency", type=int, default=None, help="Executor processes (default: CPU count)."
        )
        parser.add_argument("--burst", action="store_true", help="Exit when no due job is left.")
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=None,
            help="Seconds to let running jobs finish on SIGTERM.",
        )
        parser.add_argument(
            "--poll-interval", type=float, default=None, help="Seconds between polls when idle."
        )
        parser.add_argument(
            "--no-listen", action="store_true", help="Poll only; no LISTEN/NOTIFY (for poolers)."
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=None,
            help="Handler threads per executor for blocking tasks that wait on I/O (default: "
            "JOBS_THREADS, 0: the executor runs them one at a time).",
        )
        parser.add_argument(
            "--async-concurrency",
            type=int,
            default=None,
            help="Async handlers running at once per executor (default: JOBS_ASYNC_CONCURRENCY, 50).",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=int,
            default=0,
            help="Replace an executor after this many jobs (0: never).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        import os

        known = set(settings.TASKS["default"].get("QUEUES") or ["default"])
        try:
            queues = parse_queues(options["queues"] or ",".join(sorted(known)), known=known)
        except QueueSpecError as exc:
            raise CommandError(f"--queues: {exc}") from exc
        concurrency = options["concurrency"] if options["concurrency"] is not None else os.cpu_count() or 1
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        for name in ("threads", "async_concurrency"):
            if options[name] is not None and options[name] < 0:
                raise CommandError(f"--{name.replace('_', '-')} must be 0 or more")
        for name in ("shutdown_timeout", "poll_interval"):
            if options[name] is not None and options[name] <= 0:
                raise CommandError(f"--{name.replace('_', '-')} must be positive")
        config = WorkerConfig.from_settings(
            jobs_settings(),
            queues=queues,
            strict=options["strict"],
            concurrency=concurrency,
            burst=options["burst"],
            shutdown_timeout=options["shutdown_timeout"],
            poll_interval=options["poll_interval"],
            listen=False if options["no_listen"] else None,
            max_jobs_per_child=options["max_jobs_per_child"],
            threads=options["threads"],
            async_concurrency=options["async_concurrency"],
        )
        raise SystemExit(run_worker(config))
