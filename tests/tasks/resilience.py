"""Tasks the resilience tests run in real worker processes.

Handlers count what they did in ``test_side_effects`` (see tests/conftest.py), so a test
can tell how often each one really ran, whatever the job table says.
"""

import os
import signal
import time

from django.db import connection
from django.tasks import TaskContext, task

from jobs.exceptions import SoftTimeLimitExceeded


def _record(key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [key])


@task(priority=10)
def record_first(key: str) -> None:
    """Claimed before the other jobs of its transaction."""
    _record(key)


@task
def started_at() -> float:
    """Return the wall clock at handler start, to measure pickup latency."""
    return time.time()


@task
def sleep_and_record(key: str, seconds: float) -> None:
    """Record the start and the end of a slow handler."""
    _record(f"{key}:start")
    time.sleep(seconds)
    _record(f"{key}:end")


@task(takes_context=True, lease_seconds=1.5)
def hang_on_first_attempt(context: TaskContext, key: str) -> int:
    """Hangs on its first attempt (so its worker can be killed mid-job), then finishes."""
    _record(f"{key}:start")
    if context.attempt == 1:
        time.sleep(60)
    _record(f"{key}:end")
    return context.attempt


@task(takes_context=True)
def fail_once_then_hang(context: TaskContext, key: str) -> None:
    """Fails its first attempt and hangs in its second."""
    _record(f"{key}:{context.attempt}")
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    time.sleep(60)


@task(lease_seconds=1.0)
def outlive_lease(key: str, seconds: float) -> None:
    """Runs several times longer than its one-second lease."""
    _record(f"{key}:start")
    time.sleep(seconds)
    _record(f"{key}:end")


@task(max_attempts=2, timeout=0.8)
def spin(key: str) -> None:
    """Never returns and never gives the interpreter a reason to stop."""
    _record(key)
    while True:
        pass


@task(max_attempts=2, timeout=5.0, soft_timeout=0.3)
def spin_then_clean_up(key: str) -> None:
    """Spins until the soft limit, cleans up, and lets the error through."""
    try:
        while True:
            pass
    except SoftTimeLimitExceeded:
        _record(f"{key}:cleanup")
        raise


@task(max_attempts=1, timeout=0.8, soft_timeout=0.2)
def ignore_soft_limit(key: str) -> None:
    """Swallows the soft limit and spins on: only the hard limit stops it."""
    try:
        while True:
            pass
    except SoftTimeLimitExceeded:
        _record(f"{key}:soft")
    while True:
        pass


@task(max_attempts=2)
def exit_abruptly(key: str) -> None:
    _record(key)
    os._exit(13)


@task(max_attempts=2)
def kill_own_process(key: str) -> None:
    _record(key)
    os.kill(os.getpid(), signal.SIGKILL)


@task
def return_unstorable(key: str) -> str:
    """Returns text that JSON allows and jsonb does not."""
    _record(key)
    return "NUL \x00 here"


@task(max_attempts=100, backoff_base=0.1, backoff_cap=0.5)
def record_patiently(key: str, seconds: float) -> None:
    """Records a side effect; retried for long enough to outlast a database outage."""
    time.sleep(seconds)
    _record(key)
