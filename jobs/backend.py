"""The django.tasks backend: validate, enqueue (single and bulk), get_result.

Enqueue writes on the caller's database connection inside the caller's transaction
(invariant 1): a rollback leaves no job, a commit makes it visible, with no on_commit hook.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from django.tasks import Task
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask

from . import limits, observe, otel, signals, store
from .conf import JobsSettings, backend_alias, jobs_settings
from .db import connect, enqueue_cursor
from .exceptions import BadTaskOptions, InvalidPayload
from .ids import uuid7, uuid7_many
from .limits import LimitSpec, task_limit_name
from .models import Limit
from .options import (
    JOB_OPTIONS,
    MAX_DEDUPE_KEY_LENGTH,
    MAX_TRACE_ID_LENGTH,
    JobOptions,
    check_task_options,
    non_retryable_paths,
)
from .ownership import owner_key
from .payloads import ArgumentCheck, dump_payload
from .registry import exception_classes, on_backend, resolve_task
from .results import Call, JobResult, new_results, read_result, settle, stamp
from .retry import RetryPolicy

# Names users and the engine import from here; options and results live in their own modules.
__all__ = [
    "JOB_OPTIONS",
    "MAX_DEDUPE_KEY_LENGTH",
    "MAX_TRACE_ID_LENGTH",
    "JobOptions",
    "JobResult",
    "JobTask",
    "PostgresBackend",
    "check_payload",
    "enqueue_many",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTask(Task):
    """A django.tasks Task with the queue's own options. ``None`` means the setting."""

    max_attempts: int | None = None
    backoff_base: float | None = None
    backoff_cap: float | None = None
    jitter: bool = True
    # Hard time limit of one attempt (seconds): the executor process is killed.
    timeout: float | None = None
    # Soft limit: SoftTimeLimitExceeded is raised inside the handler first.
    soft_timeout: float | None = None
    lease_seconds: float | None = None
    # Exception classes (or dotted paths) that go straight to the dead-letter state.
    non_retryable: tuple[type[BaseException] | str, ...] = ()
    dedupe_key: str | None = None
    # Seconds: the key is held at most this long after the first enqueue.
    dedupe_window: float | None = None
    trace_id: str | None = None
    # Whose job it is (jobs.ownership.owner_key of a user, or any string) and whether the
    # status API shows its bare status to anyone holding the id.
    owner: str | None = None
    public: bool = False
    # Not-started deadline: a job that would start after it ends expired, never run.
    expires_at: datetime | None = None
    # A limit of the task's own ("100/s", "30/m", "500/h"; extra starts after an idle spell;
    # jobs running at once), or a named one (JOBS["LIMITS"] or the console), and the key
    # whose budget a job uses when the limit has one per key (jobs/limits.py).
    rate_limit: str | float | None = None
    burst: int | None = None
    concurrency_limit: int | None = None
    limit: str | None = None
    limit_key: str | None = None

    def using(self, **changes: Any) -> JobTask:
        """Django's ``using`` plus this queue's options, e.g. ``using(dedupe_key=...)``."""
        own = {k: changes.pop(k) for k in list(changes) if k in JOB_OPTIONS}
        if own.get("owner") is not None:
            try:
                own["owner"] = owner_key(own["owner"])
            except TypeError as exc:
                raise InvalidTask(str(exc)) from exc
        # Not super(): @dataclass(slots=True) builds a new class, and the zero-argument
        # super() of a method still refers to the one it replaced. With no change at all,
        # a new equal task, as Django's.
        task = Task.using(self, **changes) if changes or not own else self
        return replace(task, **own) if own else task  # type: ignore[return-value]

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[JobResult]:
        """Enqueue one job per (args, kwargs) pair in a single statement."""
        return enqueue_many(self, calls)

    def retry_policy(self) -> RetryPolicy:
        conf = jobs_settings()
        options = JobOptions.of_task(self, default_max_attempts=conf.DEFAULT_MAX_ATTEMPTS)
        return options.retry_policy(
            task_path=self.module_path, backoff_base=conf.BACKOFF_BASE, backoff_cap=conf.BACKOFF_CAP
        )

    def non_retryable_paths(self) -> tuple[str, ...]:
        """``non_retryable`` as dotted paths, the way a job row stores them."""
        return non_retryable_paths(self.non_retryable)


@dataclass(frozen=True, slots=True)
class _Template:
    """The columns and checks every job of one task (with one set of options) shares."""

    conf: JobsSettings
    task_path: str
    queue_name: str
    priority: int
    # The task's options, made once: every job of it holds them.
    options: JobOptions
    arguments: ArgumentCheck
    limit_name: str | None


class PostgresBackend(BaseTaskBackend):
    task_class = JobTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database = self.options.get("DATABASE", "default")
        self._templates: dict[tuple[Any, ...], _Template] = {}

    # --- validation -------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        if self.queues and task.queue_name not in self.queues:
            # Django's own message first (code may match on it), then what would be valid.
            raise InvalidTask(
                f"Queue '{task.queue_name}' is not valid for backend. "
                f"Configured queues: {', '.join(sorted(self.queues))}."
            )
        super().validate_task(task)
        if isinstance(task, JobTask):
            check_task_options(task)

    def _limit_of(self, options: JobTask) -> str | None:
        """The name of the limit the task's jobs are under, made sure to exist in the
        database (registered once per process, on a connection of its own)."""
        if options.rate_limit is not None or options.concurrency_limit is not None:
            spec = LimitSpec.build(
                task_limit_name(options.module_path), rate=options.rate_limit, burst=options.burst,
                concurrency=options.concurrency_limit,
            )  # fmt: skip
            limits.registry.ensure(self.database, spec, source="code")
            return spec.name
        if options.limit is None:
            return None
        declared = limits.settings_limits().get(options.limit)
        if declared is not None:
            limits.registry.ensure(self.database, declared, source="settings")
        elif not Limit.objects.using(self.database).filter(name=options.limit).exists():
            raise InvalidTask(
                f"unknown limit {options.limit!r}: declare it in JOBS_LIMITS (settings) or in the console"
            )
        return options.limit

    def _template(self, task: Task) -> _Template:
        """What every job of this task shares, worked out once per distinct set of options
        (tasks are checked when they are made: @task and .using() call validate_task)."""
        conf = jobs_settings()
        options = task if isinstance(task, JobTask) else JobTask(func=task.func)
        key = (
            task.func, task.queue_name, task.priority, task.takes_context, options.max_attempts,
            options.timeout, options.lease_seconds, options.backoff_base, options.backoff_cap,
            options.jitter, options.soft_timeout, tuple(options.non_retryable), options.rate_limit,
            options.burst, options.concurrency_limit, options.limit,
        )  # fmt: skip
        template = self._templates.get(key)
        if template is not None and template.conf is conf:
            return template
        # A task made for another backend (enqueued here directly, or after TASKS changed)
        # is checked against this one's queues and rules, as Django's backends check it.
        self.validate_task(task)
        job_options = JobOptions.of_task(options, default_max_attempts=conf.DEFAULT_MAX_ATTEMPTS)
        try:
            # Dotted paths are imported here, at enqueue, not by @task: a decorator runs
            # while its module is still being imported, and the class named may come later.
            exception_classes(job_options.non_retryable, owner=task.module_path)
        except BadTaskOptions as exc:
            raise InvalidTask(str(exc)) from exc
        template = _Template(
            conf=conf,
            task_path=task.module_path,
            queue_name=task.queue_name,
            priority=task.priority,
            # Unset timeout and lease: the worker's JOBS_DEFAULT_TIMEOUT and JOBS_LEASE_SECONDS.
            options=job_options,
            arguments=ArgumentCheck(task.func, takes_context=task.takes_context),
            limit_name=self._limit_of(options),
        )
        if len(self._templates) >= 1024:
            self._templates.clear()
        self._templates[key] = template
        return template

    def _new_job(
        self,
        task: Task,
        template: _Template,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        job_id: uuid.UUID | None = None,
    ) -> store.NewJob:
        args_json = dump_payload("args", list(args))
        kwargs_json = dump_payload("kwargs", dict(kwargs))
        if problem := template.arguments.problem(args, kwargs):
            raise InvalidPayload(f"{template.task_path}: {problem}")
        limit = template.conf.MAX_PAYLOAD_BYTES
        size = len(args_json) + len(kwargs_json)
        if size > limit:
            raise InvalidPayload(
                f"payload of {template.task_path} is {size} bytes; the limit is "
                f"{limit} (JOBS_MAX_PAYLOAD_BYTES). Pass ids, not data."
            )
        if job_id is None:
            job_id = uuid7()
        options = task if isinstance(task, JobTask) else None
        return store.NewJob(
            id=job_id,
            task_path=template.task_path,
            queue_name=template.queue_name,
            priority=template.priority,
            args=args_json,
            kwargs=kwargs_json,
            run_at=task.run_after,
            options=template.options,
            dedupe_key=options.dedupe_key if options else None,
            dedupe_window=options.dedupe_window if options else None,
            # The trace of the code enqueueing (a request, a job's handler: jobs.observe);
            # without one to join, a job starts its own: its id, which the row does not
            # repeat ("", read back by observe.job_trace and the claim).
            trace_id=(options.trace_id if options else None) or observe.current_trace.get() or "",
            owner=(options.owner if options else None) or "",
            public=options.public if options else False,
            expires_at=options.expires_at if options else None,
            limit_name=template.limit_name,
            limit_key=(options.limit_key if options else None) or "",
        )

    # --- enqueue ----------------------------------------------------------------------

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> JobResult:
        return self.bulk_enqueue([(task, args, kwargs)])[0]

    def bulk_enqueue(self, calls: Iterable[Call]) -> list[JobResult]:
        """Enqueue many jobs, of one task or several: one COPY or INSERT of their rows."""
        calls = list(calls)
        if not calls:
            return []
        if len(calls) >= store.COPY_THRESHOLD and not otel.enabled():
            made = self._copy_as_made(calls)
            if made is not None:
                return made
        per_task: dict[int, _Template] = {}
        rows = []
        for (task, args, kwargs), job_id in zip(calls, uuid7_many(len(calls)), strict=True):
            template = per_task.get(id(task))
            if template is None:
                template = per_task[id(task)] = self._template(task)
            rows.append(self._new_job(task, template, args, kwargs, job_id))
        spans: list[Any] = []
        if otel.enabled():
            explicit = [bool(getattr(task, "trace_id", None)) for task, _, _ in calls]
            rows, spans = otel.producer_spans(rows, explicit)
        try:
            return self._insert(calls, rows)
        finally:
            otel.end(spans)

    def _copy_as_made(self, calls: list[Call]) -> list[JobResult] | None:
        """A bulk enqueue of one task, due now, without dedupe key or limit, outside any
        transaction (enqueue_many in autocommit): each job is made, checked and its result
        made while PostgreSQL inserts the ones before it (store.copy_jobs_as_made); a call
        that fails its checks rolls the batch back. None where that does not apply."""
        task = calls[0][0]
        if task.run_after is not None or getattr(task, "dedupe_key", None) is not None:
            return None
        if any(other is not task for other, _, _ in calls):
            return None
        template = self._template(task)
        if template.limit_name is not None:
            return None
        cursor = enqueue_cursor(self.database)
        raw = cursor.connection
        if not (raw.autocommit and raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):
            # In the caller's transaction a failed check must not abort it: checked first.
            return None
        new_job, rows = self._new_job, []

        def made() -> Iterator[store.NewJob]:
            for (_, args, kwargs), job_id in zip(calls, uuid7_many(len(calls)), strict=True):
                row = new_job(task, template, args, kwargs, job_id)
                rows.append(row)
                yield row

        results: list[JobResult] = []
        made_rows = made()
        # The first job is checked before any statement; the results are made while
        # PostgreSQL inserts the last rows.
        enqueued_at = store.copy_jobs_as_made(
            cursor,
            next(made_rows),
            made_rows,
            meanwhile=lambda: results.extend(new_results(calls, rows, backend=self.alias)),
        )
        stamp(results, enqueued_at)
        if observe.enqueued_sink is not None:
            observe.enqueued_sink(template.task_path, len(results))
        self._announce(results)
        return results

    def _insert(self, calls: list[Call], rows: list[store.NewJob]) -> list[JobResult]:
        cursor = enqueue_cursor(self.database)
        # The results are made as if every job were new, while PostgreSQL writes a bulk
        # enqueue's rows (store.insert_jobs); then each gets its row's created_at, and those
        # a dedupe key led back to are replaced.
        results: list[JobResult] = []
        outcome = store.insert_jobs(
            cursor,
            rows,
            prepare=jobs_settings().PREPARED_STATEMENTS,
            lapse=self._lapse_running_holders,
            meanwhile=lambda: results.extend(new_results(calls, rows, backend=self.alias)),
        )
        if observe.enqueued_sink is not None:
            for row, (_, created_at) in zip(rows, outcome, strict=True):
                if created_at is not None:
                    observe.enqueued_sink(row.task_path, 1)
        settle(results, outcome, backend=self.alias, database=self.database)
        self._announce(results)
        return results

    def _announce(self, results: list[JobResult]) -> None:
        if signals.wanted(signals.task_enqueued, signals.ENQUEUED):
            for result in results:
                if not result.deduplicated:
                    signals.task_enqueued.send(sender=type(self), task_result=result)

    def _lapse_running_holders(self, ids: list[uuid.UUID], now: datetime | None) -> None:
        """Mark running jobs whose dedupe window has passed lapsed, committed at once on a
        connection of its own (see store.insert_jobs). Rows locked this moment (a
        heartbeat, an outcome) are skipped: insert_jobs tries again."""
        with connect(self.database, application_name="jobs-enqueue") as side, side.cursor() as cursor:
            store.lapse_holders(cursor, ids, now)

    # --- results ----------------------------------------------------------------------

    def get_result(self, result_id: str) -> JobResult:
        return read_result(result_id, backend=self.alias, database=self.database)


def enqueue_many(task: Task, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[JobResult]:
    """Enqueue one job of ``task`` per (args, kwargs) pair, in one statement."""
    backend = task.get_backend()
    if not isinstance(backend, PostgresBackend):
        raise InvalidTask(f"bulk enqueue needs the Postgres backend, not {type(backend).__name__}")
    return backend.bulk_enqueue((task, args, kwargs) for args, kwargs in calls)


def check_payload(task_path: str, args: Any, kwargs: Any) -> None:
    """Raise InvalidPayload (or UnknownTask) unless ``args`` and ``kwargs`` would be accepted
    by an enqueue of the task at ``task_path``: the same checks, nothing written. The
    console runs it before replaying a job with edited arguments."""
    task = on_backend(resolve_task(task_path), backend_alias())
    backend = task.get_backend()
    assert isinstance(backend, PostgresBackend)
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise InvalidPayload("args must be a JSON list and kwargs a JSON object")
    backend._new_job(task, backend._template(task), args, kwargs)
