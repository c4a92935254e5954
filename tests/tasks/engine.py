"""Tasks for the engine's own tests (retry policy options, odd outcomes)."""

import os

from django.db import connection
from django.tasks import task


class Fatal(Exception):
    """Named by dotted path in a task's non_retryable option."""


@task(max_attempts=4, backoff_base=1.0, backoff_cap=3.0)
def fail_capped() -> None:
    raise RuntimeError("capped backoff")


@task(max_attempts=3, backoff_base=8.0, jitter=False)
def fail_without_jitter() -> None:
    raise RuntimeError("no jitter")


@task(max_attempts=5, non_retryable=("tests.tasks.engine.Fatal",))
def fail_fatal() -> None:
    raise Fatal("configuration is wrong")


@task(non_retryable=("tests.tasks.engine.NoSuchError",))
def misconfigured() -> None:
    """Names an exception class that does not exist."""


@task(non_retryable=("tests.tasks.engine.record_key",))
def misconfigured_not_exception() -> None:
    """Names something that is not an exception class."""
    raise RuntimeError("fails, so the policy is consulted")


@task(max_attempts=2, backoff_base=3600.0)
def fail_with_nul(key: str | None = None) -> None:
    """Fails with a NUL byte in its message, which a jsonb column cannot hold as text."""
    if key is not None:
        record_key(key)
    raise RuntimeError("bad byte \x00 in the message")


@task
def fail_with_surrogate() -> None:
    """Fails quoting a file name that is not UTF-8, as os.fsdecode gives it."""
    raise OSError(f"cannot open {os.fsdecode(b'/tmp/caf\xe9')}")


@task
def return_nul() -> str:
    return "a\x00b"


@task
def return_surrogate() -> str:
    return os.fsdecode(b"caf\xe9")


@task
def return_value(value: object) -> object:
    return value


def record_key(key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [key])


@task
def fail_plain() -> None:
    """Fails with no retry options of its own: whatever .using() says applies."""
    raise RuntimeError("plain failure")
