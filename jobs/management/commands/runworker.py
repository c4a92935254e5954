import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.conf import backend_queues, jobs_settings
from jobs.worker import QueueSpecError, WorkerConfig, parse_queues, run_worker
from jobs.worker.config import LeaseOutOfRange


class Command(BaseCommand):
    # System checks load every URLconf and view module (for the web): seconds of start-up a
    # worker does not need. Run `manage.py check` on deploy as for the web.
    requires_system_checks: list[str] = []

    help = "Run jobs: a supervisor process with --concurrency executor processes."

    def add_arguments(self, parser: CommandParser) -> None:
        conf = jobs_settings()
        parser.add_argument(
            "--queues",
            default=None,
            help="Queues with weights, e.g. 'email:6,default:3,low:1' (default: every configured "
            f"queue, weight 1: {','.join(sorted(_known_queues()))}).",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="Strict priority: always drain earlier queues first (default: off; queues get "
            "turns in proportion to their weights).",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help=f"Executor processes (default: the CPU count, {os.cpu_count() or 1} here).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit when no due job is left (default: off, run until stopped).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=None,
            help="Seconds to let running jobs finish on SIGTERM (default: JOBS_SHUTDOWN_TIMEOUT, "
            f"now {conf.SHUTDOWN_TIMEOUT:g}).",
        )
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=None,
            help="Seconds between polls when idle (default: JOBS_POLL_INTERVAL, now "
            f"{conf.POLL_INTERVAL:g}).",
        )
        parser.add_argument(
            "--no-listen",
            action="store_true",
            help="Poll only; no LISTEN/NOTIFY, for poolers (default: JOBS_LISTEN, now "
            f"{'listen' if conf.LISTEN else 'poll only'}).",
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
            help="Replace an executor after this many jobs (default: 0, never).",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="Serve Prometheus metrics on this port at /metrics (default: JOBS_METRICS_PORT, "
            f"now {conf.METRICS_PORT}; 0: off).",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Restart the worker when the project's Python files change, for development (default: off).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        known = _known_queues()
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
        if options["metrics_port"] is not None and not 0 <= options["metrics_port"] <= 65535:
            raise CommandError("--metrics-port must be a port number (0: off)")
        if options["max_jobs_per_child"] < 0:
            raise CommandError("--max-jobs-per-child must be 0 (never replace) or more")
        if options["reload"] and options["burst"]:
            raise CommandError(
                "--reload restarts a worker that runs until stopped; it cannot go with --burst"
            )
        from jobs.db import EX_CONFIG, DatabaseRefused, refuse_unusable_database

        try:
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
                metrics_port=options["metrics_port"],
            )
        except LeaseOutOfRange as exc:
            raise CommandError(f"{exc}.", returncode=EX_CONFIG) from exc
        from jobs.worker.reload import is_reloaded_child, run_with_reload

        try:
            refuse_unusable_database()
        except DatabaseRefused as exc:
            raise CommandError(f"{exc}.", returncode=EX_CONFIG) from exc

        if options["reload"] and not is_reloaded_child():
            raise SystemExit(run_with_reload(root=Path(getattr(settings, "BASE_DIR", Path.cwd()))))
        raise SystemExit(run_worker(config))


def _known_queues() -> set[str]:
    return set(backend_queues() or ["default"])
