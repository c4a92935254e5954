"""The hard time limit kills for the attempt it read, never for the one after it: the
supervisor stops the executor, reads its slot entry again, and kills only if the same
attempt is still running (issue 7, point 7)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from jobs.conf import jobs_settings
from jobs.worker.config import WorkerConfig, parse_queues
from jobs.worker.supervisor import Child, Supervisor
from tests.support.workers import is_alive, wait_until

pytestmark = pytest.mark.process


@pytest.fixture
def supervisor() -> Supervisor:
    config = WorkerConfig.from_settings(
        jobs_settings(), queues=parse_queues("default"), strict=False, concurrency=1, burst=False
    )
    return Supervisor(config)


@pytest.fixture
def executor(supervisor: Supervisor) -> Iterator[Child]:
    """A child process standing in for an executor: it runs job A past its deadline, and
    on SIGUSR1 finishes it and starts job B in the same slot entry."""
    a, b = uuid.uuid4(), uuid.uuid4()
    slots = supervisor.slots
    now = time.monotonic()
    slots.start(0, 0, a, 1, now - 10, now - 5, 300.0)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.signal(
            signal.SIGUSR1, lambda *_: (slots.clear(0, 0), slots.start(0, 0, b, 1, now, now + 60, 300.0))
        )
        # Only now may the test signal it (SIGUSR1's default action would end it).
        os.write(ready_w, b"1")
        while True:
            time.sleep(0.01)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    child = Child(index=0, pid=pid, token=uuid.uuid4(), started=now)
    child.job_a, child.job_b = a, b  # type: ignore[attr-defined]
    yield child
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_an_attempt_that_ended_between_reading_and_killing_is_not_killed_for(
    supervisor: Supervisor, executor: Child
) -> None:
    first = supervisor.slots.snapshot(0, 0)
    assert first.running is not None and first.running.job_id == executor.job_a  # type: ignore[attr-defined]
    # Between the supervisor's reading and its kill, job A ends and job B starts.
    os.kill(executor.pid, signal.SIGUSR1)
    wait_until(lambda: supervisor.slots.read(0, 0).job_id == executor.job_b, timeout=5)  # type: ignore
    assert not supervisor._kill_if_unchanged(executor, 0, first.seq, first.running)
    assert executor.killed_for is None
    time.sleep(0.2)
    assert is_alive(executor.pid)
    assert _state(executor.pid) not in "Tt", "the executor was left stopped"


def test_an_attempt_still_running_after_the_second_reading_is_killed_for(
    supervisor: Supervisor, executor: Child
) -> None:
    first = supervisor.slots.snapshot(0, 0)
    assert supervisor._kill_if_unchanged(executor, 0, first.seq, first.running)
    assert executor.killed_for is not None and executor.killed_for[0] == executor.job_a  # type: ignore
    wait_until(lambda: not is_alive(executor.pid), timeout=5)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]
