"""The worker's hot statements are planned once per connection, not at every run.

A prepared statement gets five custom plans, then PostgreSQL keeps a generic plan unless a
custom one keeps looking cheaper. A bound parameter that lets a custom plan prune a whole
branch (the outcome write's workflow lock, once a boolean parameter) makes it look
cheaper every time: the statement was then planned again at every batch, 0.7 ms of the
1.3 ms a batch of 100 outcomes took. These tests run each statement as a worker's
connection does and read how it was planned (``pg_prepared_statements``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from jobs import store
from jobs.db import Connection
from tests.tasks import basic

pytestmark = pytest.mark.django_db(transaction=True)

# More than PostgreSQL's five custom plans: from the sixth run a generic plan is taken,
# unless the custom ones cost less.
RUNS = 8
# The first words of each claim statement (jobs/sql/claim.sql, claim_plain.sql).
CLAIM_MARKERS = {
    False: "-- claim.sql for a database where no",
    True: "-- Claim due jobs for one executor process, in one statement.",
}


def plans(cursor: Any, marker: str) -> tuple[int, int]:
    """(generic, custom) plans made so far for the prepared statement containing ``marker``."""
    cursor.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE NOT from_sql AND strpos(statement, %s) > 0",
        [marker],
    )
    [row] = cursor.fetchall()
    return row


@pytest.mark.parametrize("in_workflow", [False, True], ids=["plain-batch", "batch-with-steps"])
@pytest.mark.parametrize("limits", [False, True], ids=["claim-plain", "claim-with-limits"])
def test_the_claim_and_the_outcome_write_settle_on_one_plan(limits: bool, in_workflow: bool) -> None:
    db = Connection("default", name="test-prepared-plans")
    worker = uuid.uuid4()
    try:
        cursor = db.ensure()
        for _ in range(RUNS):
            basic.add.enqueue(1, 2)
            [row] = store.claim(
                cursor, worker=worker, queues=["default"], limit=1, limits=limits, prepare=True
            )
            outcome = {
                "id": row.id, "attempt": row.attempt, "in_workflow": in_workflow, "state": "succeeded",
                "result": 3,
            }  # fmt: skip
            ended = store.record_outcomes(
                cursor, worker=worker, outcomes=[outcome], started=[(row.id, row.attempt)], prepare=True
            )
            assert ended == {row.id: "succeeded"}
        claim_generic, claim_custom = plans(cursor, CLAIM_MARKERS[limits])
        outcome_generic, outcome_custom = plans(cursor, "-- Record the outcomes of many attempts")
        assert claim_generic >= RUNS - 5 and claim_custom <= 5, (claim_generic, claim_custom)
        assert outcome_generic >= RUNS - 5 and outcome_custom <= 5, (outcome_generic, outcome_custom)
    finally:
        db.drop()
