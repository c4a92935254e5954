"""Tasks used by the test suite and the benchmarks."""

import os
import time

from django.db import connection
from django.tasks import task

from jobs.exceptions import Discard, Retry, Snooze


@task
def noop() -> None:
    return None


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def record(key: str) -> None:
    """Count a side effect in a table, for exactly-once checks."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [key])


@task
def sleep_then_record(key: str, seconds: float) -> None:
    time.sleep(seconds)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [key])


@task(max_attempts=3, backoff_base=10.0)
def fail_always(message: str = "boom") -> None:
    raise RuntimeError(message)


@task(max_attempts=5, non_retryable=(ValueError,))
def fail_value_error() -> None:
    raise ValueError("bad input, not worth retrying")


@task
def retry_after(seconds: float) -> None:
    raise Retry("provider busy", after=seconds)


@task
def snooze(seconds: float) -> None:
    raise Snooze(seconds)


@task
def discard(reason: str) -> None:
    raise Discard(reason)


@task(takes_context=True)
def report_attempt(context, fail_until: int = 0) -> int:
    if context.attempt <= fail_until:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task
async def async_add(a: int, b: int) -> int:
    return a + b


@task(max_attempts=2, timeout=1.0)
def spin_forever() -> None:
    while True:
        pass


@task(max_attempts=2)
def exit_process() -> None:
    os._exit(13)


@task
def returns_object() -> object:
    return object()


@task
def echo(value: object, **options: object) -> list[object]:
    """Returns what it was given."""
    return [value, options]
