"""The lanes of an executor: where its handlers run.

* ``InlineLane``: blocking handlers one at a time in the executor's main thread (the
  default). The fastest path for short jobs, and the only one where a soft time limit can
  interrupt even a blocking call (SIGALRM).
* ``ThreadLane`` (``--threads N``): blocking handlers on N threads, for tasks that wait on
  I/O. A soft limit is raised in the handler's thread at its next Python instruction.
* ``AsyncLane`` (``--async-concurrency N``): coroutine handlers, up to N at once on an
  event loop in a thread of its own. Soft and hard limits cancel the coroutine; a loop
  blocked past its hard limit gets the whole process killed by the supervisor.

Every lane writes a job's slot entry before anything of it runs (the import of its task
included) and clears it after, and hands each outcome to the feeder (feeder.py). A job met
by a lane that cannot run it (an async task in the inline lane) moves to the right one.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import logging
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db import close_old_connections

from .. import otel
from ..exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from ..observe import current_trace
from ..progress import JobContext
from ..store import Claimed
from . import attempt
from .attempt import Attempts, Begun
from .feeder import Feeder
from .lane_rows import ASYNC, LaneRows
from .outcome import Outcome
from .slots import SlotTable

logger = logging.getLogger("jobs.worker")

# Handlers' Django connections are looked at after every failed job and at least this
# often (seconds) otherwise.
CONNECTION_CHECK_EVERY = 0.25


@dataclass
class Context:
    """What every lane of one executor shares."""

    index: int
    attempts: Attempts
    feeder: Feeder
    slots: SlotTable


def run_attempt(attempts: Attempts, row: Claimed, started: float) -> Outcome:
    """One whole attempt in this thread, async handlers included (the tests' runner)."""
    return attempt.run(attempts, row, started, call_async_blocking)


def call_blocking(begun: Begun) -> Any:
    return begun.info.task.func(*_args(begun), **begun.kwargs)


def call_async_blocking(begun: Begun) -> Any:
    """Any handler run to completion in this thread; an async one on a loop of its own."""
    if begun.info.is_async:
        return async_to_sync(begun.info.task.func)(*_args(begun), **begun.kwargs)
    return call_blocking(begun)


def _args(begun: Begun) -> list[Any]:
    if begun.info.takes_context:
        assert begun.running is not None and begun.progress is not None
        return [JobContext(task_result=begun.running, progress=begun.progress), *begun.args]
    return begun.args


class _BlockingLane:
    """Shared by the inline and thread lanes: one job at a time per thread."""

    def __init__(self, ctx: Context, lane: LaneRows) -> None:
        self.ctx = ctx
        self.lane = lane
        self.has_async_lane = ASYNC in ctx.feeder.lanes
        self.next_connection_check = 0.0

    def serve(self, entry: int) -> None:
        feeder = self.ctx.feeder
        while True:
            taken = feeder.take(self.lane, entry)
            if taken is None:
                return
            self.run_one(entry, *taken)

    def run_one(self, entry: int, row: Claimed, started: float) -> None:
        ctx = self.ctx
        deadline = started + row.timeout if row.timeout else 0.0
        # Before anything of the job runs: an import that exits or crashes the process
        # still counts as this attempt (the supervisor reads the entry).
        ctx.slots.start(ctx.index, entry, row.id, row.attempt, started, deadline, row.lease_seconds)
        moved = False
        try:
            if row.handbacks or row.attempt > 1:
                # Handed back unstarted before, or a retry (its last attempt may have taken
                # the process down): its start, and what finished before it, go to the
                # database before it runs.
                ctx.feeder.mark_now(row)
            begun = attempt.begin(ctx.attempts, row, started)
            if isinstance(begun, dict):
                outcome = begun
            elif begun.info.is_async and self.has_async_lane:
                ctx.feeder.reroute(self.lane, entry, row, ASYNC)
                moved = True
                return
            elif begun.info.is_async:
                outcome = attempt.perform(ctx.attempts, begun, call_async_blocking)
            else:
                ctx.feeder.learn(row, self.lane.name)
                outcome = attempt.perform(ctx.attempts, begun, lambda b: self.call(b, row))
        finally:
            ctx.slots.clear(ctx.index, entry)
        finished = time.monotonic()
        if not moved and (outcome["state"] != "succeeded" or finished >= self.next_connection_check):
            # A handler may leave its Django connection broken: after a failure, and a few
            # times a second otherwise (a check per job costs more than a no-op handler).
            self.next_connection_check = finished + CONNECTION_CHECK_EVERY
            close_old_connections()
        ctx.feeder.finished(self.lane, entry, outcome, finished - started)

    def call(self, begun: Begun, row: Claimed) -> Any:
        return call_blocking(begun)


class InlineLane(_BlockingLane):
    """Blocking handlers in the executor's main thread; soft limits by SIGALRM."""

    def __init__(self, ctx: Context, lane: LaneRows) -> None:
        super().__init__(ctx, lane)
        self.in_handler = False
        signal.signal(signal.SIGALRM, self._on_soft_time_limit)

    def _on_soft_time_limit(self, signum: int, frame: object) -> None:
        if self.in_handler:
            raise SoftTimeLimitExceeded("soft time limit exceeded")

    def call(self, begun: Begun, row: Claimed) -> Any:
        soft = row.soft_timeout
        self.in_handler = True
        if soft:
            signal.setitimer(signal.ITIMER_REAL, soft)
        try:
            return call_blocking(begun)
        finally:
            # A limit that passes right here still raises from within this call.
            self.in_handler = False
            if soft:
                signal.setitimer(signal.ITIMER_REAL, 0)


class ThreadLane(_BlockingLane):
    """Blocking handlers on threads of their own, one lane entry each."""

    def __init__(self, ctx: Context, lane: LaneRows) -> None:
        super().__init__(ctx, lane)
        self.guard = threading.Lock()
        # thread ident -> the (job id, attempt) it runs, for the soft limit.
        self.current: dict[int, tuple[Any, int]] = {}
        self.threads = [
            threading.Thread(target=self.serve, args=(entry,), name=f"jobs-handler-{entry}", daemon=True)
            for entry in lane.entries
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self, timeout: float | None = None) -> None:
        for thread in self.threads:
            thread.join(timeout)

    def call(self, begun: Begun, row: Claimed) -> Any:
        soft = row.soft_timeout
        if not soft:
            return call_blocking(begun)
        ident = threading.get_ident()
        key = (row.id, row.attempt)
        timer = threading.Timer(soft, self._interrupt, args=(ident, key))
        timer.daemon = True
        with self.guard:
            self.current[ident] = key
        timer.start()
        try:
            value = call_blocking(begun)
            # A limit raised after the handler returned still lands inside this try.
            with self.guard:
                self.current.pop(ident, None)
            return value
        finally:
            timer.cancel()
            with self.guard:
                self.current.pop(ident, None)

    def _interrupt(self, ident: int, key: tuple[Any, int]) -> None:
        with self.guard:
            if self.current.get(ident) != key:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(ident), ctypes.py_object(SoftTimeLimitExceeded)
            )


class AsyncLane:
    """Async handlers, up to one per lane entry at once, on an event loop in its own thread."""

    def __init__(self, ctx: Context, lane: LaneRows) -> None:
        self.ctx = ctx
        self.lane = lane
        self.free = list(reversed(lane.entries))
        self.tasks: set[asyncio.Task[None]] = set()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="jobs-async", daemon=True)
        lane.on_rows = self._wake

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._fill)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _wake(self) -> None:
        # Called with the feeder's lock held, from any thread.
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._fill)

    def _fill(self) -> None:
        feeder = self.ctx.feeder
        while self.free:
            entry = self.free[-1]
            taken = feeder.take(self.lane, entry, block=False)
            if taken is None:
                break
            self.free.pop()
            task = self.loop.create_task(self._attempt(entry, *taken))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        if feeder.finished_all and not self.tasks:
            self.loop.stop()

    async def _attempt(self, entry: int, row: Claimed, started: float) -> None:
        ctx = self.ctx
        deadline = started + row.timeout if row.timeout else 0.0
        ctx.slots.start(ctx.index, entry, row.id, row.attempt, started, deadline, row.lease_seconds)
        try:
            if row.handbacks or row.attempt > 1:
                await asyncio.get_running_loop().run_in_executor(None, ctx.feeder.mark_now, row)
            outcome = await self._run_attempt(row, started)
            ctx.feeder.learn(row, self.lane.name)
        finally:
            ctx.slots.clear(ctx.index, entry)
            self.free.append(entry)
        ctx.feeder.finished(self.lane, entry, outcome, time.monotonic() - started)
        self._fill()

    async def _run_attempt(self, row: Claimed, started: float) -> Outcome:
        attempts = self.ctx.attempts
        begun = attempt.begin(attempts, row, started)
        if isinstance(begun, dict):
            return begun
        # Each asyncio task has a context of its own: the trace set here is this job's.
        current_trace.set(row.trace_id)
        try:
            if not begun.info.is_async:
                # A blocking task routed here: run it off the loop, in this context.
                value = await asyncio.get_running_loop().run_in_executor(
                    None, contextvars.copy_context().run, call_blocking, begun
                )
            elif otel.enabled():
                with otel.attempt_span(row):
                    value = await self._limited(begun, row)
            else:
                value = await self._limited(begun, row)
        except BaseException as exc:  # noqa: BLE001
            return attempts.failed(row, exc, started, begun=begun)
        return attempts.succeeded(begun, value)

    async def _limited(self, begun: Begun, row: Claimed) -> Any:
        """Await the handler under its soft and hard limits (cancellation at each)."""
        coroutine = begun.info.task.func(*_args(begun), **begun.kwargs)
        hard, soft = row.timeout, row.soft_timeout
        if not hard and not soft:
            return await coroutine
        hard_scope = asyncio.timeout(hard) if hard else None
        soft_scope = asyncio.timeout(soft) if soft else None
        try:
            if hard_scope is not None:
                async with hard_scope:
                    if soft_scope is not None:
                        async with soft_scope:
                            return await coroutine
                    return await coroutine
            assert soft_scope is not None
            async with soft_scope:
                return await coroutine
        except TimeoutError as exc:
            if hard_scope is not None and hard_scope.expired():
                raise TimeLimitExceeded(
                    f"hard time limit of {hard:g}s exceeded; the coroutine was cancelled"
                ) from exc
            if soft_scope is not None and soft_scope.expired():
                raise SoftTimeLimitExceeded(f"soft time limit of {soft:g}s exceeded") from exc
            raise
