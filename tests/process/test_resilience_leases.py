"""Leases and heartbeats with real worker processes: a killed worker's job comes back and
completes elsewhere; a live one's long job is never taken from it."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest

from jobs import store
from jobs.db import Connection
from jobs.models import Job
from jobs.worker.feeder import Feeder
from jobs.worker.lane_rows import LaneRows
from tests.conftest import side_effect_counts
from tests.support import factories
from tests.support.workers import (
    WorkerProcess,
    all_in_state,
    is_alive,
    job,
    running_worker,
    start_marked,
    wait_until,
)
from tests.tasks import basic, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_sigkilled_worker_job_completes_on_another_worker_after_lease(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", name="doomed") as doomed:
        victim = resilience.hang_on_first_attempt.enqueue("victim").id
        wait_until(lambda: side_effect_counts().get("victim:start"), message="victim to start")
        wait_until(lambda: start_marked(victim), message="the victim's start mark")
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


def _warm_up(worker: WorkerProcess) -> None:
    """Let the worker measure the default queue's jobs as quick, so that it prefetches."""
    warm = [r.id for r in basic.record.enqueue_many([((f"warm-{i}",), {}) for i in range(5)])]
    wait_until(lambda: all_in_state(warm, "succeeded"), message="warm-up jobs")


def _prefetched_behind(victim: str, count: int) -> list[str]:
    """Enqueue ``count`` quick jobs once ``victim`` runs; return them once its worker has
    claimed them all to wait behind it (they are running, their attempts not started)."""
    wait_until(lambda: side_effect_counts().get(f"{victim}:start"), message=f"{victim} to start")
    others = [r.id for r in basic.record.enqueue_many([((f"other-{i}",), {}) for i in range(count)])]
    token = job(Job.objects.get(args=[victim]).id).worker_id
    wait_until(
        lambda: Job.objects.filter(id__in=others, state="running", worker_id=token).count() == count,
        timeout=5,
        message="the others to be prefetched behind the hanging job",
    )
    return others


def test_jobs_a_killed_worker_had_prefetched_come_back_within_the_unstarted_lease(tmp_path: Path) -> None:
    # A long horizon: the worker claims the others to run after its hanging job.
    with running_worker(tmp_path, "--concurrency", "1", name="doomed", JOBS_PREFETCH_HORIZON="30") as doomed:
        _warm_up(doomed)
        resilience.hang_on_first_attempt.enqueue("victim")
        others = _prefetched_behind("victim", 5)
        for held in Job.objects.filter(id__in=others):
            # Leased briefly until they start, not for the worker's 300 s.
            assert held.started_attempt < held.attempt == 1
            assert (held.lease_expires_at - held.last_attempted_at).total_seconds() == store.UNSTARTED_LEASE
        doomed.signal(signal.SIGKILL)
        doomed.wait()
        killed_at = time.monotonic()

    with running_worker(tmp_path, "--concurrency", "1", name="rescuer") as rescuer:
        wait_until(lambda: all_in_state(others, "succeeded"), timeout=store.UNSTARTED_LEASE + 10)
        back_after = time.monotonic() - killed_at
        rescuer.wait_for_log("event=reaped .* outcome=released", count=5)

    # They came back when their short lease ran out (plus the reaper's grace), unused.
    assert back_after < store.UNSTARTED_LEASE + 5
    for done in Job.objects.filter(id__in=others):
        assert (done.attempt, done.handbacks, len(done.worker_ids)) == (1, 1, 1)
    counts = side_effect_counts()
    assert all(counts[f"other-{i}"] == 1 for i in range(5))


def test_prefetched_jobs_not_started_within_half_the_unstarted_lease_go_back(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", name="busy", JOBS_PREFETCH_HORIZON="30") as busy:
        _warm_up(busy)
        resilience.hang_on_first_attempt.enqueue("victim")
        others = _prefetched_behind("victim", 3)
        busy_token = job(others[0]).worker_id
        with running_worker(tmp_path, "--concurrency", "1", name="helper"):
            # Handed back by the busy worker itself (before the reaper could take them) and
            # run by the other one, each once, no attempt used by the first claim.
            wait_until(lambda: all_in_state(others, "succeeded"), timeout=store.UNSTARTED_LEASE)
        assert "event=reaped" not in busy.log()

    for done in Job.objects.filter(id__in=others):
        assert (done.attempt, done.handbacks) == (1, 0)
        assert busy_token not in done.worker_ids
    counts = side_effect_counts()
    assert all(counts[f"other-{i}"] == 1 for i in range(3))


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


def test_feeder_gives_back_rows_it_cannot_start_within_half_their_claim_lease(transactional_db: None) -> None:
    ids = [r.id for r in basic.add.enqueue_many([((i, i), {}) for i in range(3)])]
    token = uuid.uuid4()
    db = Connection("default", name="test-claim-lease")
    try:
        lane = LaneRows("inline", entries=[0])
        feeder = Feeder(factories.worker_config(), token=token, db=db, lanes={"inline": lane})
        rows = store.claim(db.ensure(), worker=token, queues=["default"], limit=3)
        now = time.monotonic()
        # Claimed longer ago than half the claim lease: too late to start any of them.
        feeder.handout.distribute(rows, now, now - store.UNSTARTED_LEASE / 2 - 0.1)
        assert feeder.take(lane, 0, block=False) is None
        feeder.handout.release(feeder.handout.to_release, stopping=False)
        feeder.close()
    finally:
        db.drop()
    back = {(j.state, j.attempt, j.worker_id) for j in Job.objects.filter(id__in=ids)}
    assert back == {("queued", 0, None)}
