"""Real ``runworker`` processes for the resilience tests: start, watch, signal, wait.

Each worker runs in its own session so that a test can signal the supervisor alone and,
at teardown, end whatever is left of the worker by its process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.models import F

from jobs.models import Job
from jobs.states import State
from tests.conftest import manage, subprocess_env

# Settings that keep process tests short: quick polls, an eager reaper, short backoffs.
FAST = {
    "JOBS_POLL_INTERVAL": "0.2",
    "JOBS_REAPER_INTERVAL": "0.3",
    "JOBS_BACKOFF_BASE": "0.1",
    "JOBS_BACKOFF_CAP": "0.2",
    "JOBS_LOG_LEVEL": "INFO",
    "JOBS_JOB_LOG_LEVEL": "INFO",
}


class WorkerProcess:
    def __init__(self, args: tuple[str, ...], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = manage(
            "runworker", *args, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, pattern: str, *, count: int = 1, timeout: float = 15.0) -> list[str]:
        """Wait until ``pattern`` (a regex) matches ``count`` log lines; return them."""

        def matches() -> list[str] | None:
            lines = [line for line in self.log().splitlines() if re.search(pattern, line)]
            return lines if len(lines) >= count else None

        return wait_until(matches, timeout=timeout, message=f"log line {pattern!r} x{count}\n{self.log()}")

    def executor_pids(self) -> list[int]:
        """The worker's executor processes (not its housekeeper)."""
        return [pid for pid in children_of(self.pid) if process_name(pid).startswith("jobs-executor")]

    def housekeeper_pid(self) -> int | None:
        found = [pid for pid in children_of(self.pid) if process_name(pid) == "jobs-housekeep"]
        return found[0] if found else None

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        """End what is left of this worker (its own process group) and close the log."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._log.close()


@contextlib.contextmanager
def running_worker(tmp_path: Path, *args: str, name: str = "worker", **env: str) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(args, subprocess_env(**{**FAST, **env}), tmp_path / f"{name}.log")
    try:
        worker.wait_for_log("event=worker_started")
        yield worker
    finally:
        worker.stop()
        # Shown by pytest when the test fails.
        print(f"--- {name} log ---\n{worker.log()}")


def wait_until[T](
    predicate: Callable[[], T], *, timeout: float = 15.0, interval: float = 0.05, message: str = ""
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(interval)


def children_of(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            # The command name may contain spaces and parentheses: split after the last ')'.
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid and fields[0] not in "ZX":
                children.append(int(entry.name))
    return sorted(children)


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def job(job_id: Any) -> Job:
    return Job.objects.get(id=job_id)


def start_marked(job_id: Any) -> bool:
    """The running attempt's start is written. A worker killed before that (within about
    the feeder's FLUSH_AFTER of the start) has its job given back unstarted, the attempt
    refunded; a test that kills a worker mid-job to see the attempt used waits for this."""
    return Job.objects.filter(id=job_id, state=State.RUNNING, started_attempt=F("attempt")).exists()


def states(ids: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in Job.objects.filter(id__in=ids).values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts


def all_in_state(ids: list[Any], state: str) -> bool:
    return Job.objects.filter(id__in=ids, state=state).count() == len(ids)


def terminate_worker_connections(pattern: str = "jobs-%") -> int:
    """pg_terminate_backend every worker connection to this test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE %s AND pid <> pg_backend_pid()",
            [pattern],
        )
        return int(cursor.fetchone()[0])
