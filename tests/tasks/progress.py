"""Tasks that report progress and write result files (tests of jobs/progress.py, jobs/files.py)."""

import asyncio
import time

from asgiref.sync import sync_to_async
from django.db import connection
from django.tasks import task

from jobs.files import result_file_writer
from jobs.progress import JobContext


def _seen(key: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM test_side_effects WHERE key = %s", [key])
        return cursor.fetchone() is not None


@task(takes_context=True)
def count_to(context: JobContext, total: int, message: str = "") -> int:
    for done in range(total + 1):
        context.set_progress(done, total, message or f"{done} of {total}")
    return total


@task(takes_context=True, max_attempts=1)
def count_then_fail(context: JobContext, total: int) -> None:
    context.set_progress(total // 2, total, "half way")
    raise RuntimeError("gave up half way")


@task(takes_context=True)
def bad_progress(context: JobContext, done: object, total: object = None, message: object = "") -> str:
    try:
        context.set_progress(done, total, message)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


@task(takes_context=True, max_attempts=1)
def half_then_wait(context: JobContext, total: int, go_key: str) -> int:
    """Count to half slowly, wait until the test says go, then count to the end."""
    for done in range(total // 2 + 1):
        context.set_progress(done, total)
        time.sleep(0.01)
    while not _seen(go_key):
        time.sleep(0.05)
    for done in range(total // 2, total + 1):
        context.set_progress(done, total)
    return total


@task(takes_context=True, max_attempts=1)
def hammer_progress(context: JobContext, calls: int) -> float:
    """Report ``calls`` times as fast as possible; return how long that took (seconds)."""
    started = time.monotonic()
    for done in range(calls):
        context.set_progress(done, calls)
        if done % 1000 == 0:
            time.sleep(0.01)
    context.set_progress(calls, calls, "done")
    return time.monotonic() - started


@task(takes_context=True)
def write_file(context: JobContext, text: str) -> dict[str, object]:
    with result_file_writer(context.task_result.id, "greeting.txt") as out:
        assert out.file is not None
        out.file.write(text.encode())
    return {"file": out.entry, "lines": 1}


@task(takes_context=True)
def work_until_cancelled(context: JobContext, key: str, steps: int = 600) -> str:
    """Reports progress every 50 ms for up to 30 s; a cancel stops it at the next report."""
    try:
        for done in range(steps):
            context.set_progress(done, steps)
            time.sleep(0.05)
    except BaseException:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [f"{key}:stopped"])
        raise
    return "finished"


def _mark(key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_side_effects (key) VALUES (%s)", [key])


@task(takes_context=True, max_attempts=3)
async def await_cancel(context: JobContext, key: str, steps: int = 600) -> str:
    """A coroutine that checks for a cancel every 50 ms for up to 30 s; a cancel stops it."""
    try:
        for _ in range(steps):
            await context.araise_if_cancelled()
            await asyncio.sleep(0.05)
    except BaseException:
        await sync_to_async(_mark)(f"{key}:stopped")
        raise
    return "finished"
