"""Errors raised by the queue engine, and the control-flow exceptions handlers raise."""

from django.tasks.exceptions import InvalidTask


class JobsError(Exception):
    """Base class of every error the job engine raises."""


class InvalidPayload(JobsError, InvalidTask, TypeError):
    """The arguments cannot be stored: not JSON, or larger than the payload limit (a
    TypeError, as Django's own backends raise for arguments that are not JSON)."""


class JobNotFound(JobsError):
    """No job has that id."""


class TransitionNotAllowed(JobsError):
    """The job is not in a state the requested operation can start from."""


class WorkerLost(JobsError):
    """The worker holding the job vanished; its lease expired."""


class ProcessDied(JobsError):
    """The executor process died while running the job (os._exit, signal, out of memory)."""


class TimeLimitExceeded(JobsError):
    """The attempt ran past the task's hard time limit and its process was killed."""


class SoftTimeLimitExceeded(JobsError):
    """Raised inside the handler when its soft time limit passes, so it can clean up."""


class JobCancelled(JobsError):
    """Raised inside a handler at its next check (``context.set_progress``,
    ``context.raise_if_cancelled``, ``await context.araise_if_cancelled``) once an operator
    cancelled its job while it ran."""


class UnknownTask(JobsError):
    """The job names a task path that does not import to a Task."""


class BadPayload(JobsError):
    """The stored arguments do not fit the task's signature or are not a list and a dict."""


class BadTaskOptions(JobsError):
    """A task's options cannot be applied: a non_retryable entry is not an exception class."""


class BadReturnValue(JobsError, TypeError):
    """The handler returned a value that is not JSON (a TypeError, as Django records it)."""


class JobControl(Exception):
    """Base of the exceptions a handler raises to steer its job instead of failing it."""


class Retry(JobControl):
    """Fail this attempt and retry after ``after`` seconds (default: the backoff)."""

    def __init__(self, reason: str = "retry requested", *, after: float | None = None):
        super().__init__(reason)
        self.after = after


class Snooze(JobControl):
    """Run again after ``seconds`` without using an attempt."""

    def __init__(self, seconds: float):
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = seconds


class Discard(JobControl):
    """Stop retrying: send the job straight to the dead-letter state with this reason."""
