"""Heartbeats extend exactly the jobs a worker runs, and nothing another transaction does
can stop them; the worker's LISTEN connection is drained while handlers run (issue 7,
points 8, 10 and 11)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from django.db import transaction

from jobs.db import connect
from jobs.models import Job, Worker
from jobs.states import State
from tests.conftest import side_effect_counts
from tests.support import factories
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import hostile

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_a_row_lock_held_by_another_transaction_stops_no_other_lease_extension(tmp_path: Path) -> None:
    with (
        running_worker(tmp_path, "--concurrency", "2", name="owner", JOBS_LEASE_SECONDS="2") as owner,
        running_worker(tmp_path, "--concurrency", "1", name="rival", JOBS_LEASE_SECONDS="2") as rival,
    ):
        held = hostile.sleep_and_record.enqueue("held", 6.0).id
        other = hostile.sleep_and_record.enqueue("other", 6.0).id
        wait_until(lambda: side_effect_counts().keys() >= {"held:start", "other:start"}, timeout=20)
        # An operator's (or anyone's) transaction holds one running row for twice the lease.
        with connect(application_name="test-locker") as locker, locker.transaction():
            locker.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [held])
            time.sleep(4.0)
        wait_until(lambda: job(other).state == State.SUCCEEDED, timeout=15)
        logs = owner.log() + rival.log()
    # The other job's lease was extended all along: never taken from its worker.
    assert f"event=reaped job={other}" not in logs
    assert side_effect_counts()["other:start"] == 1


def test_enqueueing_a_key_whose_running_holder_lapsed_leaves_the_holder_unlocked(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", JOBS_LEASE_SECONDS="2") as worker:
        keyed = hostile.sleep_and_record.using(dedupe_key="report:7", dedupe_window=1)
        held = keyed.enqueue("held", 4.0).id
        wait_until(lambda: side_effect_counts().get("held:start"), timeout=20)
        time.sleep(1.2)
        with transaction.atomic():
            successor = keyed.enqueue("successor", 0.0)
            assert not successor.deduplicated
            # The holder was marked lapsed on a connection of its own: its row is free for
            # its worker's heartbeat while this transaction stays open. (A wait of a second,
            # not NOWAIT: the heartbeat itself holds the row for a moment every lease/3.)
            with connect(application_name="test-probe") as probe:
                probe.execute("SET lock_timeout = '1s'")
                probe.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [held])
            time.sleep(3.0)
        wait_until(lambda: job(held).state == State.SUCCEEDED, timeout=15)
        assert "event=reaped" not in worker.log()
    assert side_effect_counts()["held:start"] == 1


def test_a_row_under_a_live_token_that_is_not_in_hand_is_not_extended(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", JOBS_LEASE_SECONDS="2") as worker:
        wait_until(lambda: Worker.objects.filter(slot_tokens__len=1).exists(), timeout=10)
        [token] = Worker.objects.get().slot_tokens
        # As a claim whose reply was lost leaves it: running under the executor's token,
        # never started, unknown to the executor.
        orphan = factories.job(
            State.RUNNING,
            task_path="tests.tasks.basic.record",
            args=["orphan"],
            worker=token,
            started=False,
            lease_seconds=2,
        )
        wait_until(lambda: job(orphan.id).state == State.SUCCEEDED, timeout=10)
        assert "event=reaped" in worker.log()
    done = job(orphan.id)
    assert (done.attempt, done.handbacks, done.errors) == (1, 1, [])
    assert side_effect_counts() == {"orphan": 1}


def test_notifications_are_drained_while_a_long_handler_runs(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1"):
        long = hostile.sleep_and_record.enqueue("long", 15.0).id
        wait_until(lambda: side_effect_counts().get("long:start"), timeout=20)
        with (
            connect(application_name="test-notifier") as notifier,
            connect(application_name="test-listener") as listener,
        ):
            listener.execute("LISTEN jobs_queued")
            for _ in range(4):
                # Distinct payloads: PostgreSQL folds identical ones within a transaction.
                notifier.execute(
                    "SELECT pg_notify('jobs_queued', n || repeat('x', 7000)) "
                    "FROM generate_series(1, 2500) AS n"
                )
            # They were queued (this listener reads all of them)...
            received = sum(1 for _ in listener.notifies(timeout=5, stop_after=10_000))
            assert received == 10_000
            # ...and every listener has read them: the worker's too, though its only handler
            # is busy for seconds more (PostgreSQL keeps them until the slowest listener reads).
            wait_until(
                lambda: notifier.execute("SELECT pg_notification_queue_usage()").fetchone()[0] < 1e-5,
                timeout=5,
                message="the notification queue to drain",
            )
        assert job(long).state == State.RUNNING


def test_a_job_taken_from_under_its_handler_is_not_retried_by_every_heartbeat(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", JOBS_LEASE_SECONDS="3") as worker:
        taken = hostile.sleep_and_record.enqueue("taken", 6.0).id
        wait_until(lambda: "taken:start" in side_effect_counts(), timeout=20)
        # Claimed by another worker (after a reap) while its handler here still runs.
        Job.objects.filter(id=taken).update(worker_id=uuid.uuid4())
        beats = set()
        with connect(application_name="test-observer") as observer:
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                beats.update(
                    row[0]
                    for row in observer.execute(
                        "SELECT query_start FROM pg_stat_activity "
                        "WHERE application_name = 'jobs-housekeeper' AND query LIKE '%%Heartbeat: extend%%'"
                    )
                )
                time.sleep(0.01)
        worker.log()
    # A beat every lease/3 (1 s): two or three in the window. Retrying the job no longer held
    # every 0.1 s, as a locked one is, made twenty.
    assert len(beats) <= 4, sorted(beats)
