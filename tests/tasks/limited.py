"""Tasks under rate and concurrency limits, for tests/integration/test_limits.py and the
limit drills in tests/process/test_limits.py."""

import time

from django.db import connection
from django.tasks import task


def record(key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key, at) VALUES (%s, clock_timestamp())", [key])


@task(rate_limit="10/s", burst=2)
def rated(key: str) -> None:
    record(key)


@task(concurrency_limit=2)
def two_at_a_time(key: str) -> None:
    record(key)


@task(limit="reports")
def report(key: str) -> None:
    record(key)


@task(limit="reports")
def report_slowly(key: str, seconds: float) -> None:
    record(key)
    time.sleep(seconds)


@task(limit="provider")
def call_provider(key: str, seconds: float = 0.0) -> None:
    record(f"{key}:start")
    time.sleep(seconds)
    record(f"{key}:end")


@task(concurrency_limit=3)
def slow_three_at_a_time(key: str, seconds: float) -> None:
    record(f"{key}:start")
    time.sleep(seconds)
    record(f"{key}:end")


@task(rate_limit="100/s", burst=5)
def hundred_a_second(key: str) -> None:
    record(key)


@task(concurrency_limit=1)
def one_at_a_time(key: str, seconds: float, fail: bool = False) -> None:
    """Ignores cancellation: sleeps its time through, then fails if told to."""
    record(f"{key}:start")
    time.sleep(seconds)
    record(f"{key}:end")
    if fail:
        raise RuntimeError(f"{key} failed at its end")


@task(limit="reports")
def report_in_turn(key: str, seconds: float) -> None:
    record(f"{key}:start")
    time.sleep(seconds)
    record(f"{key}:end")
