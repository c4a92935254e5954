"""The supervisor's hard time limits: an executor whose handler overruns its limit is
killed (a ``while True: pass`` or a blocking C call cannot be interrupted from inside),
race-free: the executor is stopped (SIGSTOP) and its slot entry read again before the
kill, so the job killed for is the job recorded."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from .children import Child
from .slots import Running, SlotTable

logger = logging.getLogger("jobs.worker")

# An async handler past its hard limit is cancelled by its own event loop; the process is
# killed only if the loop has not managed that this long after the limit (it is blocked).
ASYNC_KILL_GRACE = 2.0
# How long a stopped executor may take to reach the stopped state before it is killed
# on the strength of the first reading.
STOP_PATIENCE = 1.0


def enforce_time_limits(slots: SlotTable, async_entries: set[int], children: list[Child], now: float) -> None:
    for child in children:
        if child.killed_for is not None:
            continue
        for entry in range(slots.entries):
            snapshot = slots.snapshot(child.index, entry)
            running = snapshot.running
            if running is None or not running.deadline:
                continue
            grace = ASYNC_KILL_GRACE if entry in async_entries else 0.0
            if now > running.deadline + grace and kill_if_unchanged(
                slots, child, entry, snapshot.seq, running
            ):
                break


def kill_if_unchanged(slots: SlotTable, child: Child, entry: int, seq: int, running: Running) -> bool:
    """Stop the executor, read the entry again, and kill only if it still runs the same
    attempt (between the first reading and the kill the job may have finished and the
    next started)."""
    send_signal(child.pid, signal.SIGSTOP)
    _wait_stopped(child.pid)
    again = slots.snapshot(child.index, entry)
    if again.seq != seq or again.running != running:
        send_signal(child.pid, signal.SIGCONT)
        return False
    child.killed_for = (running.job_id, running.attempt, running.deadline - running.started)
    logger.warning("event=time_limit job=%s attempt=%d pid=%d", running.job_id, running.attempt, child.pid)
    send_signal(child.pid, signal.SIGKILL)
    return True


def _wait_stopped(pid: int) -> None:
    """Until ``pid`` is in the stopped state (or gone), at most STOP_PATIENCE."""
    deadline = time.monotonic() + STOP_PATIENCE
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            state = stat.read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return
        if state in "TtZX":
            return
        os.sched_yield()


def send_signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
