"""Tasks the workflow tests chain together. Side effects go to test_side_effects."""

import time
from typing import Any

from django.db import connection
from django.tasks import TaskContext, task


def _effect(key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [key])


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def times(a: int, b: int) -> int:
    return a * b


@task
def collect(values: list[Any], label: str = "") -> dict[str, Any]:
    return {"label": label, "values": values}


@task
def effect(value: Any, key: str) -> Any:
    """Record a side effect named ``key`` and pass the value on."""
    _effect(key)
    return value


@task
def first_effect(key: str) -> str:
    _effect(key)
    return key


@task(max_attempts=1)
def fail(*args: Any) -> None:
    raise RuntimeError("this step always fails")


@task(max_attempts=3, backoff_base=5.0, jitter=False)
def flaky(value: Any, key: str, failures: int) -> Any:
    """Fails its first ``failures`` attempts, then records ``key`` and passes the value on."""
    raise_until(key, failures)
    return value


@task(takes_context=True, max_attempts=3, backoff_base=5.0, jitter=False)
def undo(context: TaskContext, key: str, failures: int = 0) -> str:
    """A compensation: fails its first ``failures`` attempts, then records 'undo:<key>'."""
    if context.attempt <= failures:
        raise RuntimeError(f"undo {key} failed (attempt {context.attempt})")
    _effect(f"undo:{key}")
    return f"undone {key}"


def raise_until(key: str, failures: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM test_side_effects WHERE key = %s", [f"try:{key}"])
        tried = cursor.fetchone()[0]
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [f"try:{key}"])
    if tried < failures:
        raise RuntimeError(f"{key} failed (try {tried + 1})")
    _effect(key)


@task
def stage(value: int, key: str) -> int:
    """One step of the process tests' pipeline: record it, add one."""
    _effect(key)
    return value + 1


@task
def total(values: list[int], key: str) -> int:
    _effect(key)
    return sum(values)


@task(takes_context=True, lease_seconds=1.5)
def hang_first(context: TaskContext, value: int, key: str) -> int:
    """Hangs on its first attempt, so that its worker can be killed in the middle of it."""
    _effect(f"{key}:start")
    if context.attempt == 1:
        time.sleep(60)
    _effect(f"{key}:end")
    return value + 1


@task
def slow_effect(*args: Any, key: str, seconds: float) -> str:
    """Records '<key>:start', works ``seconds`` without looking for a cancel, records
    '<key>:end' (its side effect is done), returns ``key``."""
    _effect(f"{key}:start")
    time.sleep(seconds)
    _effect(f"{key}:end")
    return key


@task(max_attempts=1)
def fail_after(*args: Any, seconds: float) -> None:
    time.sleep(seconds)
    raise RuntimeError("this step fails after a while")
