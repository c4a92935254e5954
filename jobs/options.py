"""A job's options: the bundle every job row carries (attempts, time limits, lease, backoff,
non-retryable errors), and the checks a task's options pass before any job of it is made.

``JobOptions`` is the one spelling of that bundle. Each of its fields is the jobs_job column
of its name (``OPTION_COLUMNS``). The enqueue backend makes it from a task (``@task(...)``,
``.using(...)``), once per task, and every row of that task's jobs holds it (jobs.store's
NewJob): the store writes its ``column_values``. The worker reads it back from a claimed row
(``from_row``) and turns it into a retry policy, so the executor, the supervisor's
settlements and the reaper decide with the same values.

Adding an option: a field here (and its line in ``of_task``), its column on jobs_job, and
the column in the statements that write and claim rows (jobs/sql/insert*.sql, claim*.sql).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from operator import attrgetter
from typing import Any

from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from .conf import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS
from .limits import InvalidLimit, LimitSpec, task_limit_name
from .ownership import MAX_OWNER_LENGTH
from .payloads import unstorable_text
from .registry import exception_classes
from .retry import RetryPolicy

# Longest dedupe key and trace id accepted at enqueue (characters).
MAX_DEDUPE_KEY_LENGTH = 500
MAX_TRACE_ID_LENGTH = 200

# Options that @task(...) and .using(...) accept beyond Django's own.
JOB_OPTIONS = (
    "max_attempts", "backoff_base", "backoff_cap", "jitter", "timeout", "soft_timeout",
    "lease_seconds", "non_retryable", "dedupe_key", "dedupe_window", "trace_id",
    "owner", "public", "expires_at", "rate_limit", "burst", "concurrency_limit", "limit", "limit_key",
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """The options a job row stores, as stored: ``None`` means the worker's setting
    (JOBS_DEFAULT_TIMEOUT, JOBS_LEASE_SECONDS, JOBS_BACKOFF_BASE and _CAP, jitter on). A
    field's default is its column's default."""

    max_attempts: int
    # Hard time limit of one attempt (seconds): the executor process is killed.
    timeout: float | None = None
    lease_seconds: float | None = None
    backoff_base: float | None = None
    backoff_cap: float | None = None
    # NULL on the row is the default (jitter on); only False is written.
    jitter: bool | None = None
    # Soft limit: SoftTimeLimitExceeded is raised inside the handler first.
    soft_timeout: float | None = None
    # Dotted paths of exception classes that go straight to the dead-letter state.
    non_retryable: tuple[str, ...] = ()
    # Made once with the options (one per task, held by each of its jobs' rows, so nothing
    # of this is made per job): the fields' values in OPTION_COLUMNS order as statements
    # take them (non_retryable a list, for a text[]) ...
    column_values: tuple[Any, ...] = field(init=False, repr=False, compare=False)
    # ... and whether every option but max_attempts has its default: then the columns'
    # defaults stand for them, and a row writes max_attempts alone (jobs/sql/insert_plain.sql).
    plain: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = _read_columns(self)
        object.__setattr__(
            self, "column_values", tuple(list(v) if isinstance(v, tuple) else v for v in values)
        )
        object.__setattr__(
            self, "plain", all(getattr(self, name) == default for name, default in _DEFAULTS.items())
        )

    @classmethod
    def of_task(cls, task: Any, *, default_max_attempts: int) -> JobOptions:
        """The options of a checked task's jobs (``non_retryable`` as dotted paths)."""
        return cls(
            max_attempts=task.max_attempts or default_max_attempts,
            timeout=task.timeout,
            soft_timeout=task.soft_timeout,
            lease_seconds=task.lease_seconds,
            backoff_base=task.backoff_base,
            backoff_cap=task.backoff_cap,
            jitter=None if task.jitter else False,
            non_retryable=non_retryable_paths(task.non_retryable),
        )

    @classmethod
    def from_row(cls, row: Any) -> JobOptions:
        """The options of a job row read back (a claimed row, jobs.store.Claimed, or any
        object with the columns as attributes)."""
        return cls.from_columns(_read_columns(row))

    @classmethod
    def from_columns(cls, values: Sequence[Any]) -> JobOptions:
        """The options of a job row from its OPTION_COLUMNS' values, in that order, as read
        (non_retryable a list, or None)."""
        options = dict(zip(OPTION_COLUMNS, values, strict=True))
        options["non_retryable"] = tuple(options["non_retryable"] or ())
        return cls(**options)

    def retry_policy(self, *, task_path: str, backoff_base: float, backoff_cap: float) -> RetryPolicy:
        """The retry policy of a job of ``task_path`` with these options, the given
        backoff settings where the row has none. BadTaskOptions if a non_retryable path
        does not import."""
        return RetryPolicy(
            max_attempts=self.max_attempts,
            backoff_base=backoff_base if self.backoff_base is None else self.backoff_base,
            backoff_cap=backoff_cap if self.backoff_cap is None else self.backoff_cap,
            jitter=True if self.jitter is None else self.jitter,
            non_retryable=exception_classes(self.non_retryable, owner=task_path),
        )


# jobs_job's columns that JobOptions fill: its fields' names, in the order of its ``column_values``.
OPTION_COLUMNS: tuple[str, ...] = tuple(option.name for option in fields(JobOptions) if option.init)
# The options that have a default (every one but max_attempts), with it.
_DEFAULTS = {option.name: option.default for option in fields(JobOptions) if option.default is not MISSING}
_read_columns = attrgetter(*OPTION_COLUMNS)


def retry_key(row: Any) -> tuple[Any, ...]:
    """What the retry policy of a claimed row's job is made of (its task and the options
    ``retry_policy`` reads), hashable: a worker keeps the policies it made by this key, and
    reads a row's options only for a key it has not seen."""
    return (row.task_path, row.max_attempts, row.backoff_base, row.backoff_cap, row.jitter,
            tuple(row.non_retryable))  # fmt: skip


def non_retryable_paths(entries: Iterable[type[BaseException] | str]) -> tuple[str, ...]:
    """``non_retryable`` entries as dotted paths, the way a job row stores them."""
    return tuple(
        entry if isinstance(entry, str) else f"{entry.__module__}.{entry.__qualname__}" for entry in entries
    )


def check_task_options(task: Any) -> None:
    """InvalidTask unless a task's own options (jobs.backend.JobTask's fields) are in
    range; Django's own checks and the backend's queues are the backend's."""
    if task.max_attempts is not None and (not isinstance(task.max_attempts, int) or task.max_attempts < 1):
        raise InvalidTask("max_attempts must be a whole number of at least 1.")
    for name in ("backoff_base", "backoff_cap", "timeout", "soft_timeout", "dedupe_window"):
        value = getattr(task, name)
        if value is not None and not (isinstance(value, int | float) and value > 0):
            raise InvalidTask(f"{name} must be a positive number of seconds.")
    if task.lease_seconds is not None and not (MIN_LEASE_SECONDS <= task.lease_seconds <= MAX_LEASE_SECONDS):
        raise InvalidTask(
            f"lease_seconds must be between {MIN_LEASE_SECONDS:g} and {MAX_LEASE_SECONDS:g} "
            "(extended every third of it, a lease must leave room for a stalled extension "
            "to be noticed and retried)."
        )
    if task.soft_timeout and task.timeout and task.soft_timeout >= task.timeout:
        raise InvalidTask("soft_timeout must be shorter than timeout.")
    if task.dedupe_key is not None and not _bounded_text(task.dedupe_key, MAX_DEDUPE_KEY_LENGTH):
        raise InvalidTask(
            f"dedupe_key must be a non-empty string of at most {MAX_DEDUPE_KEY_LENGTH} characters "
            f"without NUL (hash a longer key, e.g. hashlib.sha256(key).hexdigest()), "
            f"not {task.dedupe_key!r:.80}."
        )
    if task.dedupe_window is not None and not task.dedupe_key:
        raise InvalidTask("dedupe_window needs a dedupe_key.")
    if task.trace_id is not None and not _bounded_text(task.trace_id, MAX_TRACE_ID_LENGTH):
        raise InvalidTask(
            f"trace_id must be a non-empty string of at most {MAX_TRACE_ID_LENGTH} characters "
            f"without NUL, not {task.trace_id!r:.80}."
        )
    if not isinstance(task.jitter, bool):
        raise InvalidTask("jitter must be True or False.")
    if not isinstance(task.non_retryable, tuple | list):
        raise InvalidTask("non_retryable must be a tuple of exception classes or dotted paths.")
    for entry in task.non_retryable:
        # Dotted paths are imported at enqueue, not here: @task runs while
        # its module is still being imported, and the class named may come later.
        is_class = isinstance(entry, type) and issubclass(entry, BaseException)
        if not isinstance(entry, str) and not is_class:
            raise InvalidTask(f"non_retryable entries are exception classes or dotted paths, not {entry!r}.")
    owner = task.owner
    if owner is not None and not (
        isinstance(owner, str) and 0 < len(owner) <= MAX_OWNER_LENGTH and not unstorable_text(owner)
    ):
        raise InvalidTask(
            f"owner must be a model instance or a string of 1 to {MAX_OWNER_LENGTH} characters."
        )
    if not isinstance(task.public, bool):
        raise InvalidTask("public must be True or False.")
    _check_limit(task)
    if task.expires_at is not None:
        if not isinstance(task.expires_at, datetime):
            raise InvalidTask("expires_at must be a datetime.")
        if timezone.is_naive(task.expires_at):
            raise InvalidTask("expires_at must be an aware datetime (naive ones are ambiguous).")


def _check_limit(task: Any) -> None:
    own = task.rate_limit is not None or task.concurrency_limit is not None or task.burst is not None
    if own and task.limit is not None:
        raise InvalidTask(
            "a task has either limits of its own (rate_limit, concurrency_limit) or limit=, not both."
        )
    if task.burst is not None and task.rate_limit is None:
        raise InvalidTask("burst needs a rate_limit.")
    if own:
        try:
            LimitSpec.build(
                task_limit_name(task.module_path), rate=task.rate_limit, burst=task.burst,
                concurrency=task.concurrency_limit,
            )  # fmt: skip
        except InvalidLimit as exc:
            raise InvalidTask(str(exc)) from exc
    if task.limit is not None and not (isinstance(task.limit, str) and task.limit):
        raise InvalidTask(f"limit names a limit (a non-empty string), not {task.limit!r}.")
    if task.limit_key is not None:
        if task.limit is None and not own:
            raise InvalidTask("limit_key needs a limit (limit=, rate_limit= or concurrency_limit=).")
        if not _bounded_text(task.limit_key, MAX_DEDUPE_KEY_LENGTH):
            raise InvalidTask(
                f"limit_key must be a non-empty string of at most {MAX_DEDUPE_KEY_LENGTH} characters."
            )


def _bounded_text(value: object, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and not unstorable_text(value)
