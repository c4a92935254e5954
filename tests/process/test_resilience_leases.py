"""Leases and heartbeats with real worker processes: a killed worker's job comes back and
completes elsewhere; a live one's long job is never taken from it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.conftest import side_effect_counts
from tests.process.resilience_support import (
    all_in_state,
    is_alive,
    job,
    running_worker,
    wait_until,
)
from tests.tasks import basic, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


@pytest.mark.xfail(
    strict=False,
    reason="known bug under investigation: now and then one job the killed worker had claimed "
    "behind its hanging handler is not brought back within 20 s (about 1 run in 3)",
)
def test_sigkilled_worker_job_completes_on_another_worker_after_lease(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", name="doomed") as doomed:
        victim = resilience.hang_on_first_attempt.enqueue("victim").id
        wait_until(lambda: side_effect_counts().get("victim:start"), message="victim to start")
        others = [r.id for r in basic.record.enqueue_many([((f"other-{i}",), {}) for i in range(5)])]
        executors = [*doomed.executor_pids(), doomed.housekeeper_pid()]
        assert len(executors) == 2 and None not in executors

        doomed.signal(signal.SIGKILL)
        doomed.wait()
        # PR_SET_PDEATHSIG: the executor dies with its supervisor instead of running on.
        wait_until(lambda: not any(is_alive(pid) for pid in executors), timeout=5, message="executor death")
        assert job(victim).state == "running"

    with running_worker(tmp_path, "--concurrency", "2", name="rescuer") as rescuer:
        # The victim's lease runs out; the rescuer's reaper puts it back and it runs again.
        wait_until(lambda: all_in_state([*others, victim], "succeeded") or None, timeout=20)
        assert "event=reaped" in rescuer.log()

    done = job(victim)
    assert done.attempt == 2
    assert len(done.worker_ids) == 2
    assert [e["exception"] for e in done.errors] == ["jobs.exceptions.WorkerLost"]
    counts = side_effect_counts()
    assert counts["victim:start"] == 2
    assert counts["victim:end"] == 1
    assert all(counts[f"other-{i}"] == 1 for i in range(5))


def test_long_job_with_heartbeats_outlives_its_lease_and_runs_once(tmp_path: Path) -> None:
    with (
        running_worker(tmp_path, "--concurrency", "1", name="owner") as owner,
        running_worker(tmp_path, "--concurrency", "1", name="rival", JOBS_REAPER_INTERVAL="0.1") as rival,
    ):
        long_job = resilience.outlive_lease.enqueue("long", 4.0).id
        wait_until(lambda: job(long_job).state == "succeeded", timeout=15)

    done = job(long_job)
    assert done.attempt == 1
    assert done.errors == []
    assert side_effect_counts() == {"long:start": 1, "long:end": 1}
    assert "event=reaped" not in owner.log() + rival.log()
