"""The operators' CLI: ``manage.py jobs <command>``. Every change goes through jobs.store, as
the console's do; bad ids, filters or JSON end with a clear message and a non-zero exit.

    jobs stats [--json]
    jobs list [--state S] [--queue Q] [--task T] [--limit N] [--json]
    jobs show ID
    jobs retry ID... | --dead [--task T] [--queue Q] [--limit N]
    jobs cancel ID...
    jobs pause QUEUE / jobs resume QUEUE
    jobs prune --older-than DURATION [--state S]
    jobs enqueue TASK_PATH [--args JSON] [--kwargs JSON] [--queue Q] [--delay SECONDS]
    jobs limit NAME [--rate 100/s] [--burst N] [--concurrency N] [--per-key] [--lift]
    jobs limits
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from jobs import stats, store
from jobs.console import changelist as console
from jobs.exceptions import JobsError
from jobs.limits import CONSOLE, InvalidLimit, LimitSpec
from jobs.models import FINISHED_STATES, Job, Limit, LimitState
from jobs.observe import job_trace
from jobs.states import State

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"45s"`` or plain seconds -> seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise CommandError(f"a duration is a number with s, m, h, d or w (e.g. 30d), not {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2) or "s"]


def parse_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a job id (a UUID)") from None


def parse_json(text: str | None, name: str, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"--{name} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise CommandError(f"--{name} must be a JSON {'list' if kind is list else 'object'}")
    return value


class Command(BaseCommand):
    help = "Operate the job queue: stats, list, show, retry, cancel, pause, resume, prune, enqueue, limits."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        p = sub.add_parser(
            "stats", help="Per queue: queued, scheduled, retrying, running, dead, oldest due age."
        )
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("list", help="Jobs, newest first.")
        p.add_argument("--state", choices=sorted(console.CONSOLE_STATES))
        p.add_argument("--queue")
        p.add_argument("--task")
        p.add_argument("--limit", type=int, default=50)
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("show", help="One job in full.")
        p.add_argument("id")
        p = sub.add_parser("retry", help="Replay dead, cancelled or expired jobs.")
        p.add_argument("ids", nargs="*", metavar="ID")
        p.add_argument("--dead", action="store_true", help="Replay dead jobs matching --task/--queue.")
        p.add_argument("--task")
        p.add_argument("--queue")
        p.add_argument("--limit", type=int, default=1000)
        p = sub.add_parser("cancel", help="Cancel jobs (a running one ends when its attempt does).")
        p.add_argument("ids", nargs="+", metavar="ID")
        p = sub.add_parser("pause", help="Stop workers claiming from a queue.")
        p.add_argument("queue")
        p = sub.add_parser("resume", help="Let workers claim from a paused queue again.")
        p.add_argument("queue")
        p = sub.add_parser("prune", help="Delete finished jobs older than a duration.")
        p.add_argument("--older-than", required=True, help="e.g. 30d, 12h, 90m")
        p.add_argument("--state", choices=sorted(s.value for s in FINISHED_STATES))
        p = sub.add_parser("enqueue", help="Enqueue a job of a task.")
        p.add_argument("task_path")
        p.add_argument("--args", dest="payload_args", help="JSON list")
        p.add_argument("--kwargs", dest="payload_kwargs", help="JSON object")
        p.add_argument("--queue")
        p.add_argument("--delay", type=float, default=0.0, help="seconds")
        p = sub.add_parser("limit", help="Change (or create, or lift) a named rate/concurrency limit.")
        p.add_argument("name")
        p.add_argument("--rate", help="e.g. 100/s, 30/m, 500/h")
        p.add_argument("--burst", type=int)
        p.add_argument("--concurrency", type=int)
        p.add_argument("--per-key", action="store_true", default=None, help="a budget per limit key")
        p.add_argument("--shared", dest="per_key", action="store_false", help="one budget for all keys")
        p.add_argument("--lift", action="store_true", help="no rate and no concurrency limit")
        sub.add_parser("limits", help="The limits, with their running and waiting jobs.")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, "do_" + options["command"])(options)

    # --- reading -------------------------------------------------------------------------

    def do_stats(self, options: dict[str, Any]) -> None:
        current = stats.queue_stats()
        if options["json"]:
            queues = {
                name: {key: values[key] for key in (*stats.BUCKETS, "oldest_due_age_s", "paused")}
                for name, values in current["queues"].items()
            }
            self.stdout.write(json.dumps({"queues": queues, "workers": current["workers"]}, indent=2))
            return
        header = f"{'queue':<20}{'queued':>9}{'scheduled':>11}{'retrying':>10}{'running':>9}{'dead':>9}"
        self.stdout.write(header + f"{'oldest due':>12}  status")
        for name, q in current["queues"].items():
            age = "-" if q["oldest_due_age_s"] is None else f"{q['oldest_due_age_s']:.1f}s"
            self.stdout.write(
                f"{name:<20}{q['queued']:>9}{q['scheduled']:>11}{q['retrying']:>10}{q['running']:>9}"
                f"{q['dead']:>9}{age:>12}  {'paused' if q['paused'] else 'active'}"
            )
        self.stdout.write(f"workers: {current['workers']} ({current['jobs_in_hand']} jobs in hand)")

    def do_list(self, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        jobs = Job.objects.order_by("-id").only(
            "id", "task_path", "queue_name", "state", "attempt", "max_attempts", "created_at", "last_error",
            "limit_name", "limit_wait", "cancel_requested_at",
        )  # fmt: skip
        if options["state"]:
            jobs = jobs.filter(console.CONSOLE_STATES[options["state"]][1])
        if options["queue"]:
            jobs = jobs.filter(queue_name=options["queue"])
        if options["task"]:
            jobs = jobs.filter(task_path=options["task"])
        rows = list(jobs[: options["limit"]])
        if options["json"]:
            self.stdout.write(json.dumps([_summary(job) for job in rows], indent=2))
            return
        for job in rows:
            error = job.last_error.strip().splitlines()[0][:60] if job.last_error.strip() else ""
            self.stdout.write(
                f"{job.id}  {console.moment(job.created_at)}  {console.console_state(job):<10} "
                f"{job.attempt}/{job.max_attempts}  {job.queue_name:<10} {job.task_path}  {error}"
            )

    def do_show(self, options: dict[str, Any]) -> None:
        job = Job.objects.filter(id=parse_id(options["id"])).first()
        if job is None:
            raise CommandError(f"no job with id {options['id']}")
        detail = {
            **_summary(job),
            "priority": job.priority, "args": job.args, "kwargs": job.kwargs, "result": job.result,
            "run_at": _iso(job.run_at), "started_at": _iso(job.started_at),
            "finished_at": _iso(job.finished_at), "lease_expires_at": _iso(job.lease_expires_at),
            "worker_id": str(job.worker_id) if job.worker_id else None,
            "trace_id": job_trace(job.trace_id, job.id),
            "dedupe_key": job.dedupe_key, "errors": job.errors, "edits": job.edits,
        }  # fmt: skip
        self.stdout.write(json.dumps(detail, indent=2, default=str))

    def do_limits(self, options: dict[str, Any]) -> None:
        self.stdout.write(
            f"{'limit':<30}{'rate/s':>9}{'burst':>7}{'concurrency':>13}  {'per key':<8}{'source':<9}"
            f"{'running':>8}{'waiting':>8}"
        )
        for limit in Limit.objects.order_by("name"):
            running = sum(LimitState.objects.filter(limit_name=limit.name).values_list("running", flat=True))
            waiting = (
                Job.objects.filter(limit_name=limit.name, state=State.SCHEDULED)
                .exclude(limit_wait="")
                .count()
            )
            rate = "-" if limit.rate is None else f"{limit.rate:g}"
            concurrency = "-" if limit.concurrency is None else str(limit.concurrency)
            self.stdout.write(
                f"{limit.name:<30}{rate:>9}{limit.burst:>7}{concurrency:>13}  "
                f"{'yes' if limit.per_key else 'no':<8}{limit.source:<9}{running:>8}{waiting:>8}"
            )

    # --- changing --------------------------------------------------------------------------

    def do_retry(self, options: dict[str, Any]) -> None:
        if options["ids"] and options["dead"]:
            raise CommandError("give job ids or --dead, not both")
        if options["dead"]:
            if options["limit"] < 1:
                raise CommandError("--limit must be at least 1")
            jobs = Job.objects.filter(state=State.DEAD).order_by("id")
            if options["task"]:
                jobs = jobs.filter(task_path=options["task"])
            if options["queue"]:
                jobs = jobs.filter(queue_name=options["queue"])
            ids = list(jobs.values_list("id", flat=True)[: options["limit"]])
        elif options["ids"]:
            if options["task"] or options["queue"]:
                raise CommandError("--task and --queue go with --dead")
            ids = [parse_id(text) for text in options["ids"]]
        else:
            raise CommandError("give job ids, or --dead [--task T] [--queue Q]")
        self._each(ids, lambda job_id: store.replay(job_id, by="manage.py jobs"), "replayed")

    def do_cancel(self, options: dict[str, Any]) -> None:
        self._each([parse_id(text) for text in options["ids"]], store.cancel, "cancelled")

    def _each(self, ids: list[uuid.UUID], operation: Any, verb: str) -> None:
        failed = 0
        for job_id in ids:
            try:
                operation(job_id)
            except JobsError as exc:
                failed += 1
                self.stderr.write(f"{job_id}: {exc}")
            else:
                self.stdout.write(f"{job_id}: {verb}")
        self.stdout.write(f"{len(ids) - failed} {verb}, {failed} refused")
        if failed:
            raise CommandError(f"{failed} job(s) could not be {verb}", returncode=1)

    def do_pause(self, options: dict[str, Any]) -> None:
        changed = store.pause_queue(options["queue"], by="manage.py jobs")
        self.stdout.write(f"queue {options['queue']} {'paused' if changed else 'was already paused'}")

    def do_resume(self, options: dict[str, Any]) -> None:
        changed = store.resume_queue(options["queue"])
        self.stdout.write(f"queue {options['queue']} {'resumed' if changed else 'was not paused'}")

    def do_prune(self, options: dict[str, Any]) -> None:
        seconds = parse_duration(options["older_than"])
        states = [State(options["state"])] if options["state"] else sorted(FINISHED_STATES)
        deleted = store.prune(retention=dict.fromkeys(states, seconds))
        self.stdout.write(f"deleted {deleted} finished job(s) older than {options['older_than']}")

    def do_enqueue(self, options: dict[str, Any]) -> None:
        from jobs.registry import resolve_task

        args = parse_json(options["payload_args"], "args", list)
        kwargs = parse_json(options["payload_kwargs"], "kwargs", dict)
        if options["delay"] < 0:
            raise CommandError("--delay must not be negative")
        try:
            task = resolve_task(options["task_path"])
            changes: dict[str, Any] = {}
            if options["queue"]:
                changes["queue_name"] = options["queue"]
            if options["delay"]:
                changes["run_after"] = timezone.now() + timedelta(seconds=options["delay"])
            if changes:
                task = task.using(**changes)
            result = task.enqueue(*args, **kwargs)
        except (InvalidTask, JobsError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(result.id))

    def do_limit(self, options: dict[str, Any]) -> None:
        name = options["name"]
        with transaction.atomic():
            limit = Limit.objects.select_for_update().filter(name=name).first()
            if limit is None:
                limit = Limit(name=name)
            if options["lift"]:
                if options["rate"] or options["concurrency"] is not None:
                    raise CommandError("--lift removes the rate and concurrency; give neither with it")
                limit.rate, limit.concurrency = None, None
            else:
                rate = options["rate"] if options["rate"] is not None else limit.rate
                concurrency = (
                    options["concurrency"] if options["concurrency"] is not None else limit.concurrency
                )
                burst = options["burst"] if options["burst"] is not None else limit.burst
                per_key = options["per_key"] if options["per_key"] is not None else limit.per_key
                try:
                    spec = LimitSpec.build(
                        name, rate=rate, burst=burst, concurrency=concurrency, per_key=per_key
                    )
                except InvalidLimit as exc:
                    raise CommandError(str(exc)) from None
                limit.rate, limit.burst, limit.concurrency, limit.per_key = (
                    spec.rate, spec.burst, spec.concurrency, spec.per_key,
                )  # fmt: skip
            # As in the console: an operator's values stand until reset.
            limit.source = CONSOLE
            limit.save()
        woken = store.limit_changed(name)
        rate = "-" if limit.rate is None else f"{limit.rate:g}/s"
        self.stdout.write(
            f"limit {name}: rate {rate}, burst {limit.burst}, concurrency {limit.concurrency or '-'}, "
            f"{'per key' if limit.per_key else 'shared'}; {woken} waiting job(s) decided again"
        )


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _summary(job: Job) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "task": job.task_path,
        "queue": job.queue_name,
        "state": console.console_state(job),
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "created_at": _iso(job.created_at),
        "last_error": job.last_error or None,
    }
