"""Nothing a handler, its task's import or a signal receiver does can keep a job's outcome
from being recorded or make it loop: every attempt that ran counts, the job ends dead after
its attempts, and executors that keep dying are restarted with a growing delay and a log
line that says why once per streak (issue 7, points 4 and 5)."""

from __future__ import annotations

import itertools
import re
from datetime import datetime
from pathlib import Path

import pytest

from jobs.states import State
from tests.conftest import side_effect_counts
from tests.support import factories
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import hostile

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_an_exception_that_cannot_be_printed_is_recorded_and_retried_to_dead(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        bad = hostile.raise_unprintable.enqueue("unprintable").id
        wait_until(lambda: job(bad).state == State.DEAD, timeout=20)
        assert worker.proc.poll() is None
    dead = job(bad)
    assert dead.attempt == 3
    assert side_effect_counts() == {"unprintable": 3}
    assert [e["exception"] for e in dead.errors] == ["tests.tasks.hostile.Unprintable"] * 3
    assert dead.last_error == "<Unprintable whose str() raised RuntimeError>"
    assert "event=executor_lost" not in worker.log()


def test_a_receiver_that_raises_is_logged_never_taken_for_the_jobs_outcome(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        ok = hostile.succeed_with_a_bad_receiver.enqueue("ok").id
        failed = hostile.fail_with_a_bad_receiver.enqueue("failed").id
        wait_until(lambda: job(ok).state == State.SUCCEEDED and job(failed).state == State.DEAD, timeout=20)
    assert (job(ok).attempt, job(ok).result, job(ok).errors) == (1, "done", [])
    assert [e["exception"] for e in job(failed).errors] == ["builtins.ValueError"]
    assert job(failed).last_error == "the job's own error"
    assert side_effect_counts() == {"ok": 1, "failed": 1}
    assert worker.log().count("event=signal_receiver_failed signal=task_finished") == 2


@pytest.mark.parametrize(
    "task_path, exception",
    [
        # os._exit at import: the executor dies before the handler is even reached.
        ("tests.tasks.exits_on_import.boom", "jobs.exceptions.ProcessDied"),
        # sys.exit() at import: recorded as the attempt's error, the executor lives.
        ("tests.tasks.raises_system_exit_on_import.boom", "builtins.SystemExit"),
    ],
)
def test_a_task_whose_import_kills_or_exits_uses_its_attempts_and_ends_dead(
    tmp_path: Path, task_path: str, exception: str
) -> None:
    pills = [
        factories.job(State.QUEUED, task_path=task_path, max_attempts=2, lease_seconds=30) for _ in range(3)
    ]
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        good = factories.job(State.QUEUED, task_path="tests.tasks.basic.record", args=["after"])
        wait_until(lambda: all(job(p.id).state == State.DEAD for p in pills), timeout=40)
        wait_until(lambda: job(good.id).state == State.SUCCEEDED, timeout=20)
        log = worker.log()
    for pill in pills:
        dead = job(pill.id)
        assert dead.attempt == 2
        assert [e["exception"] for e in dead.errors] == [exception] * 2
    deaths = log.count("event=executor_lost")
    if exception == "jobs.exceptions.ProcessDied":
        # One executor death per attempt, no more: nothing was refunded and run again.
        assert deaths == 6
        # Said once per streak and then at 2, 4, ... deaths in a row, not once per death.
        loop_lines = [line for line in log.splitlines() if "event=executor_crash_loop" in line]
        assert 1 <= len(loop_lines) <= 3
        # The respawns back off: the gaps between deaths grow.
        times = [_at(line) for line in log.splitlines() if "event=executor_lost" in line]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert gaps[-1] > gaps[0]
    else:
        assert deaths == 0


def _at(line: str) -> datetime:
    stamp = re.search(r"ts=(\S+ \S+)", line)
    assert stamp is not None
    return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")  # noqa: DTZ007
