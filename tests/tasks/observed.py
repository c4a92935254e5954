"""Tasks for the observability tests: each takes an email address that must never appear in
a metric or a log line."""

import asyncio
import time

from django.tasks import TaskContext, task

from jobs.observe import current_trace


@task
def greet(email: str) -> str:
    return "hello"


@task(max_attempts=3, backoff_base=0.05, jitter=False, takes_context=True)
def flaky(context: TaskContext, email: str) -> int:
    if context.attempt == 1:
        raise ConnectionError("first attempt fails")
    return context.attempt


@task(max_attempts=1)
def doomed(email: str) -> None:
    raise RuntimeError("always fails")


@task
def fan_out(email: str) -> str | None:
    """Enqueues a child job: it joins this job's trace."""
    greet.enqueue(email)
    return current_trace.get()


@task
def nap(email: str, seconds: float) -> None:
    time.sleep(seconds)


@task(timeout=0.5, max_attempts=1)
async def overrun(email: str) -> None:
    """Cancelled by its event loop at its hard limit (the process is not killed)."""
    await asyncio.sleep(30)
