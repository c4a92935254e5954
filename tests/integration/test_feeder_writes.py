"""How an executor's feeder writes outcomes when PostgreSQL refuses a batch for a reason
that is not in it: a deadlock with another worker's statement (two executors finishing
steps of two workflows take the workflows' row locks in opposite orders) or a
serialization failure. The connection runs the same fenced batch again, on the same
connection (jobs/db.py: nothing was lost but a race); it must never reach the
one-by-one fallback, which records an outcome the database refuses as a dead job."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from jobs.db import Connection
from jobs.models import Job
from jobs.states import State
from jobs.worker.feeder import Feeder
from jobs.worker.lane_rows import LaneRows
from tests.support import factories
from tests.tasks import basic

pytestmark = pytest.mark.django_db(transaction=True)

# A statement trigger that fails the next ``n`` updates of jobs_job with PostgreSQL's own
# deadlock error, counted by a sequence (a sequence is not rolled back with them).
REFUSALS = """
CREATE SEQUENCE test_refusals;
CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('test_refusals') <= {n} THEN
        RAISE EXCEPTION 'deadlock detected (test)' USING ERRCODE = '{code}';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER test_refuse BEFORE UPDATE ON jobs_job FOR EACH STATEMENT EXECUTE FUNCTION test_refuse();
"""


@pytest.fixture
def refuse_updates() -> Iterator[Callable[..., None]]:
    def install(n: int, code: str = "40P01") -> None:
        with connection.cursor() as cursor:
            cursor.execute(REFUSALS.format(n=int(n), code=code))

    yield install
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS test_refuse ON jobs_job")
        cursor.execute("DROP FUNCTION IF EXISTS test_refuse()")
        cursor.execute("DROP SEQUENCE IF EXISTS test_refusals")


def claimed(count: int) -> tuple[Feeder, Connection, list[dict[str, object]]]:
    """A feeder holding ``count`` claimed jobs, and the outcomes of their attempts."""
    for i in range(count):
        basic.add.enqueue(i, i)
    db = Connection("default", name="test-feeder-writes")
    lane = LaneRows("threads", entries=list(range(count)))
    feeder = Feeder(factories.worker_config(), token=uuid.uuid4(), db=db, lanes={"threads": lane})
    assert feeder.claimer.claim_if_room(time.monotonic()) is True
    rows = list(lane.waiting)
    assert len(rows) == count
    outcomes = [
        {"id": row.id, "attempt": row.attempt, "state": "succeeded", "result": 2 * i}
        for i, row in enumerate(rows)
    ]
    return feeder, db, outcomes


@pytest.mark.parametrize("code", ["40P01", "40001"], ids=["deadlock", "serialization_failure"])
def test_a_batch_refused_by_deadlocks_is_written_again_and_no_job_goes_dead(
    refuse_updates: Callable[..., None], caplog: pytest.LogCaptureFixture, code: str
) -> None:
    feeder, db, outcomes = claimed(2)
    try:
        backend = db.ensure().connection.info.backend_pid
        refuse_updates(3, code)
        with caplog.at_level(logging.WARNING, logger="jobs"):
            feeder.outbox.write(outcomes, [])
        assert db.ensure().connection.info.backend_pid == backend
    finally:
        feeder.close()
        db.drop()
    assert sorted(Job.objects.values_list("state", "result")) == [(State.SUCCEEDED, 0), (State.SUCCEEDED, 2)]
    assert "outcome_batch_refused" not in caplog.text
    assert caplog.text.count(f"event=db_conflict conn=test-feeder-writes sqlstate={code}") == 3
    assert "db_connection_lost" not in caplog.text
