"""Heartbeats extend exactly the jobs a worker runs, and nothing another transaction does
can stop them; the worker's LISTEN connection is drained while handlers run (issue 7,
points 8, 10 and 11)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db import transaction

from jobs.models import Worker
from jobs.states import State
from jobs.worker.db import connect
from tests import factories
from tests.conftest import side_effect_counts
from tests.process.resilience_support import job, running_worker, wait_until
from tests.tasks import hostile

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_a_row_lock_held_by_an_enqueuer_stops_no_lease_extension(tmp_path: Path) -> None:
    with (
        running_worker(tmp_path, "--concurrency", "2", name="owner", JOBS_LEASE_SECONDS="2") as owner,
        running_worker(tmp_path, "--concurrency", "1", name="rival", JOBS_LEASE_SECONDS="2") as rival,
    ):
        keyed = hostile.sleep_and_record.using(dedupe_key="report:7", dedupe_window=1)
        held = keyed.enqueue("held", 6.0).id
        other = hostile.sleep_and_record.enqueue("other", 6.0).id
        wait_until(lambda: side_effect_counts().keys() >= {"held:start", "other:start"}, timeout=20)
        time.sleep(1.2)
        # The key's window has passed: enqueueing it again marks the running holder lapsed,
        # and this transaction holds that row's lock for twice the lease.
        with transaction.atomic():
            successor = keyed.enqueue("successor", 0.0)
            assert not successor.deduplicated
            time.sleep(4.0)
        wait_until(
            lambda: job(held).state == State.SUCCEEDED and job(other).state == State.SUCCEEDED, timeout=15
        )
        logs = owner.log() + rival.log()
    assert "event=reaped" not in logs
    counts = side_effect_counts()
    assert (counts["held:start"], counts["other:start"]) == (1, 1)


def test_a_row_under_a_live_token_that_is_not_in_hand_is_not_extended(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1", JOBS_LEASE_SECONDS="2") as worker:
        wait_until(lambda: Worker.objects.exists(), timeout=10)
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
        with connect(application_name="test-notifier") as notifier:
            payload = "x" * 7000
            for _ in range(4):
                notifier.execute(
                    "SELECT pg_notify('jobs_queued', %s) FROM generate_series(1, 2500)", [payload]
                )
            peak = notifier.execute("SELECT pg_notification_queue_usage()").fetchone()[0]
            assert peak > 0
            # Every listener reads its notifications at once, so the queue empties, though the
            # only handler of this worker is busy for seconds more.
            wait_until(
                lambda: notifier.execute("SELECT pg_notification_queue_usage()").fetchone()[0] < peak / 20,
                timeout=5,
                message="the notification queue to drain",
            )
        assert job(long).state == State.RUNNING
