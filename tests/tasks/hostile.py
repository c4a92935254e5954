"""Tasks that do what hostile production code does to a worker: exceptions that cannot be
printed, signal receivers that raise, long handlers, blocking I/O, coroutines."""

import asyncio
import time

from django.db import connection
from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_finished


def record(key: str) -> None:
    """Count a side effect with the moment it happened (clock_timestamp, not the
    transaction's start), so tests can see what overlapped."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key, at) VALUES (%s, clock_timestamp())", [key])


class Unprintable(Exception):
    """An exception whose __str__ raises, as some C extensions' do."""

    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


@task(max_attempts=3, backoff_base=0.05, backoff_cap=0.1)
def raise_unprintable(key: str) -> None:
    record(key)
    raise Unprintable()


@task
def succeed_with_a_bad_receiver(key: str) -> str:
    record(key)
    return "done"


@task(max_attempts=1)
def fail_with_a_bad_receiver(key: str) -> None:
    record(key)
    raise ValueError("the job's own error")


@receiver(task_finished)
def receiver_that_raises(sender: object, task_result: object, **kwargs: object) -> None:
    name = getattr(getattr(task_result, "task", None), "name", "")
    if name in ("succeed_with_a_bad_receiver", "fail_with_a_bad_receiver"):
        raise RuntimeError("a task_finished receiver failed")


@task
def sleep_and_record(key: str, seconds: float) -> None:
    """Blocking I/O stand-in: records its start and end."""
    record(f"{key}:start")
    time.sleep(seconds)
    record(f"{key}:end")


@task
async def async_sleep(key: str, seconds: float) -> str:
    """Async I/O stand-in; no database inside the coroutine."""
    started = time.time()
    await asyncio.sleep(seconds)
    return f"{key} {started} {time.time()}"


@task(timeout=0.5, max_attempts=1)
async def async_overrun(key: str) -> None:
    await asyncio.sleep(30)


@task(soft_timeout=0.3, timeout=5.0, max_attempts=1)
async def async_soft_limited(key: str) -> None:
    await asyncio.sleep(30)


@task
async def async_block_the_loop(seconds: float) -> None:
    """A coroutine that blocks its loop (a sync call inside async code)."""
    time.sleep(seconds)


@task(soft_timeout=0.3, timeout=10.0, max_attempts=1)
def spin_in_thread(key: str) -> None:
    """Spins in Python code: a soft limit can reach it in a handler thread."""
    record(f"{key}:start")
    while True:
        pass


@task(timeout=3.0, max_attempts=1)
def spin_with_a_limit(key: str) -> None:
    while True:
        pass


@task(timeout=5.0, max_attempts=1)
def spin_forever(key: str) -> None:
    """Spins, cleaning up at a soft limit if one is set (through .using())."""
    from jobs.exceptions import SoftTimeLimitExceeded

    try:
        while True:
            pass
    except SoftTimeLimitExceeded:
        record(f"{key}:soft")
        raise
