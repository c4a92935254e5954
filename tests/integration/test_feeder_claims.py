"""When an executor's feeder claims: again at once while the claims come back full, not after
one that found fewer due jobs than it asked for (that one would find nothing), and then soon
once more, for a job committed while it ran; without the limits' planning until a limit is
declared, and under the limits from the claim that finds one."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

import pytest
from django.test import override_settings

from jobs import limits
from jobs.db import Connection
from jobs.models import LimitState
from jobs.worker import prefetch
from jobs.worker.claimer import RECHECKS, Claimer
from jobs.worker.feeder import Feeder
from jobs.worker.lane_rows import LaneRows
from jobs.worker.outbox import FLUSH_AFTER
from tests.support import factories
from tests.tasks import basic, limited

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_limit_registry() -> Any:
    limits.registry.forget()
    yield
    limits.registry.forget()


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The claim statements made (one entry each)."""
    made: list[int] = []
    claim = Claimer._claim

    def counted(self: Claimer, cursor: Any, **kwargs: Any) -> list[Any]:
        made.append(1)
        return claim(self, cursor, **kwargs)

    monkeypatch.setattr(Claimer, "_claim", counted)
    return made


def feeder_with_room(db: Connection, entries: int, **config: Any) -> tuple[Feeder, LaneRows]:
    lane = LaneRows("threads", entries=list(range(entries)))
    worker_config = replace(factories.worker_config(), **config)
    feeder = Feeder(worker_config, token=uuid.uuid4(), db=db, lanes={"threads": lane})
    return feeder, lane


def test_a_claim_that_came_back_short_is_not_followed_by_another_at_once(claims: list[int]) -> None:
    basic.add.enqueue(1, 2)
    db = Connection("default", name="test-feeder-claims")
    try:
        feeder, lane = feeder_with_room(db, entries=4)
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(lane.waiting) == 1 and len(claims) == 1
        # Room for three more, but the queue had no more: no statement now...
        assert feeder.claimer.claim_if_room(time.monotonic()) is False
        assert len(claims) == 1
        assert 0 < feeder.claimer.idle_until - time.monotonic() <= RECHECKS[0]
        # ...one soon (a job committed meanwhile sent no wake-up: its queue had a due job).
        later = basic.add.enqueue(3, 4).id
        assert feeder.claimer.claim_if_room(feeder.claimer.idle_until) is True
        assert len(claims) == 2 and lane.waiting[-1].id == uuid.UUID(later)
        # Then, finding nothing: one look soon, one a little later, then the poll interval.
        for wait in (*RECHECKS[1:], feeder.config.poll_interval):
            assert feeder.claimer.claim_if_room(feeder.claimer.idle_until) is False
            assert RECHECKS[0] < feeder.claimer.idle_until - time.monotonic() <= wait
        assert len(claims) == 2 + len(RECHECKS)
        feeder.close()
    finally:
        db.drop()


def test_full_claims_are_followed_by_the_next_at_once(claims: list[int]) -> None:
    basic.add.enqueue_many([((i, i), {}) for i in range(6)])
    db = Connection("default", name="test-feeder-claims")
    try:
        feeder, lane = feeder_with_room(db, entries=2, max_batch=2)
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(lane.waiting) == 2
        lane.waiting.clear()  # as if both had started and finished
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(claims) == 2 and len(lane.waiting) == 2
        feeder.close()
    finally:
        db.drop()


def test_rows_with_large_payloads_are_claimed_in_smaller_batches(
    claims: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A claim takes about CLAIM_BYTES of payloads, at the size of the rows claimed so far:
    # here 2,000 bytes, and rows of about 500 bytes, so four a claim once one was seen.
    monkeypatch.setattr(prefetch, "CLAIM_BYTES", 2_000)
    basic.echo.enqueue_many([(("x" * 490,), {}) for _ in range(10)])
    db = Connection("default", name="test-feeder-claims")
    try:
        feeder, lane = feeder_with_room(db, entries=20, max_batch=20)
        assert feeder.prefetch.batch_limit(20) == 20, "nothing measured yet: JOBS_MAX_BATCH"
        with monkeypatch.context() as one_slot:
            one_slot.setattr(feeder.prefetch, "budget", lambda lanes, now: {"threads": 1.0})
            assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(lane.waiting) == 1
        assert 490 < feeder.prefetch.row_bytes < 520  # type: ignore[operator]
        assert feeder.prefetch.batch_limit(20) == 4
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(lane.waiting) == 1 + 4 and len(claims) == 2
        feeder.close()
    finally:
        db.drop()


def test_a_limit_declared_while_the_feeder_claimed_without_limits_is_applied_in_the_same_claim(
    claims: list[int],
) -> None:
    free = basic.add.enqueue(1, 2).id
    held = limited.two_at_a_time.enqueue("c").id
    db = Connection("default", name="test-feeder-claims")
    try:
        feeder, lane = feeder_with_room(db, entries=4)
        assert feeder.claimer.limits is False
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(claims) == 1 and feeder.claimer.limits is True
        assert {str(row.id) for row in lane.waiting} == {free, held}
        assert all(row.decision == "start" for row in lane.waiting)
        assert LimitState.objects.get(limit_name="task:tests.tasks.limited.two_at_a_time").running == 1
        feeder.close()
    finally:
        db.drop()


@pytest.mark.parametrize("measured", [False, True], ids=["task-time-unknown", "task-time-measured"])
def test_no_prefetch_horizon_still_claims_one_job_for_an_idle_handler(measured: bool) -> None:
    # JOBS_PREFETCH_HORIZON=0: nothing is claimed ahead, but an idle handler takes a job.
    basic.add.enqueue_many([((i, i), {}) for i in range(3)])
    db = Connection("default", name="test-feeder-claims")
    try:
        lane = LaneRows("inline", entries=[0])
        config = replace(factories.worker_config(), prefetch_horizon=0.0)
        feeder = Feeder(config, token=uuid.uuid4(), db=db, lanes={"inline": lane})
        if measured:
            feeder.prefetch.expected["default"] = 0.001
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(lane.waiting) == 1
        # While it runs, the feeder sleeps until a handler pokes it (no turn every instant).
        row = lane.waiting.popleft()
        lane.running[0] = (row, time.monotonic())
        feeder.outbox.marked.add((row.id, row.attempt))
        with feeder.cv:
            assert feeder._next_deadline_locked(time.monotonic()) > 0
        feeder.close()
    finally:
        db.drop()


def test_rows_handed_to_an_idle_lane_do_not_keep_the_feeder_turning(claims: list[int]) -> None:
    # A claim that came back full leaves rows waiting for a lane that has not taken them yet:
    # nothing runs, and there is no room to claim into. Looking again at once, over and over,
    # would hold the GIL the lane needs to start them (its first job waited a whole switch
    # interval). The feeder looks again in time to mark the start instead.
    basic.add.enqueue(1, 2)
    db = Connection("default", name="test-feeder-claims")
    try:
        lane = LaneRows("inline", entries=[0])
        feeder = Feeder(factories.worker_config(), token=uuid.uuid4(), db=db, lanes={"inline": lane})
        # The task's time is unknown: one job per claim, and the claim comes back full.
        assert feeder.claimer.claim_if_room(time.monotonic()) is True
        assert len(lane.waiting) == 1 and not lane.running
        now = time.monotonic()
        assert feeder.claimer.claim_if_room(now) is False
        assert len(claims) == 1
        with feeder.cv:
            assert 0 < feeder._next_deadline_locked(now) == pytest.approx(FLUSH_AFTER)
        feeder.close()
    finally:
        db.drop()


@pytest.mark.parametrize(
    ("prepared", "statements"), [(True, 2), (False, 0)], ids=["prepared", "not-prepared"]
)
def test_the_claim_and_the_outcome_are_prepared_from_their_first_run(prepared: bool, statements: int) -> None:
    # An executor's first pickups are not planned from scratch each (psycopg would prepare
    # them only from their fifth run), unless JOBS_PREPARED_STATEMENTS=false (a pooler in
    # transaction mode that cannot keep them).
    job = basic.add.enqueue(1, 2)
    with override_settings(JOBS={"PREPARED_STATEMENTS": prepared}):
        db = Connection("default", name="test-feeder-claims")
        try:
            feeder, lane = feeder_with_room(db, entries=1)
            assert feeder.claimer.claim_if_room(time.monotonic()) is True
            [row] = lane.waiting
            outcome = {"id": row.id, "attempt": row.attempt, "state": "succeeded", "result": 3}
            assert feeder.outbox.record([outcome], [(row.id, row.attempt)]) == {row.id: "succeeded"}
            cursor = db.ensure()
            cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements"
                " WHERE statement LIKE '%UPDATE jobs_job%' AND NOT from_sql"
            )
            assert cursor.fetchone()[0] == statements
            feeder.close()
        finally:
            db.drop()
    assert basic.add.get_result(job.id).status == "SUCCESSFUL"
