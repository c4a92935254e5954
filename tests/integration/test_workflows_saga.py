"""Compensation (saga), cancel, and retrying a failed step."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from jobs import store
from jobs.models import Job
from jobs.workflows import WorkflowNotFound, cancel, chain, group, retry_step, step, wait_signal
from tests.support import factories
from tests.tasks import workflows as t

from .workflow_support import clock, drive, effects, prepare_effects

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _effects() -> None:
    prepare_effects()


def saga(*, undo_b_failures: int = 0):
    return chain(
        step(t.first_effect, "a", compensate=step(t.undo, "a")),
        step(t.effect, "b", compensate=step(t.undo, "b", undo_b_failures)),
        step(t.effect, "c"),
        step(t.fail),
        step(t.effect, "d", compensate=step(t.undo, "d")),
    )


def test_compensations_of_the_steps_that_succeeded_run_in_reverse_order() -> None:
    run = saga().enqueue()
    drive(run)
    assert run.status == "failed"
    assert "this step always fails" in run.error
    assert effects() == ["a", "b", "c", "undo:b", "undo:a"]
    outcomes = [(n.label, n.state, n.result) for n in run.compensations()]
    assert outcomes == [
        ("undo: undo", "succeeded", "undone b"),
        ("undo: undo", "succeeded", "undone a"),
        ("undo: undo", "cancelled", None),
    ]


def test_compensations_wait_while_the_workflow_runs_and_are_dropped_when_it_succeeds() -> None:
    run = chain(step(t.first_effect, "a", compensate=step(t.undo, "a")), step(t.effect, "b")).enqueue()
    assert [n.state for n in run.compensations()] == ["pending"]
    drive(run)
    assert run.status == "succeeded"
    assert [n.state for n in run.compensations()] == ["cancelled"]
    assert effects() == ["a", "b"]


def test_a_compensation_is_retried_by_its_own_policy() -> None:
    run = saga(undo_b_failures=1).enqueue()
    drive(run)
    assert run.status == "failed"
    assert effects() == ["a", "b", "c", "undo:b", "undo:a"]
    undo_b = Job.objects.get(id=run.compensations()[0].job_id)
    assert (undo_b.state, undo_b.attempt) == ("succeeded", 2)
    assert "undo b failed (attempt 1)" in undo_b.errors[0]["message"]


def test_a_compensation_that_dies_is_recorded_and_the_others_still_run() -> None:
    run = saga(undo_b_failures=10).enqueue()
    drive(run)
    assert run.status == "failed"
    assert effects() == ["a", "b", "c", "undo:a"]
    first, second, _ = run.compensations()
    assert (first.state, second.state) == ("failed", "succeeded")
    assert "undo b failed (attempt 3)" in first.error


def test_the_compensation_of_a_step_still_running_when_its_group_failed_runs_once_it_succeeds() -> None:
    run = group(step(t.fail), step(t.first_effect, "slow", compensate=step(t.undo, "slow"))).enqueue()
    worker = uuid.uuid4()
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=worker, queues=["default"], limit=2, now=clock())
        by_task = {row.task_path.rsplit(".", 1)[1]: row for row in claimed}
        store.record_outcomes(
            cursor,
            worker=worker,
            outcomes=[{"id": str(by_task["fail"].id), "attempt": 1, "state": "dead",
                       "error": {"exception": "RuntimeError", "message": "boom", "traceback": ""}}],
        )  # fmt: skip
    assert run.refresh().status == "compensating", "the running member's outcome is awaited"
    with connection.cursor() as cursor:
        store.record_outcomes(
            cursor,
            worker=worker,
            outcomes=[
                {"id": str(by_task["first_effect"].id), "attempt": 1, "state": "succeeded", "result": 1}
            ],
        )
    drive(run)
    assert run.status == "failed"
    assert effects() == ["undo:slow"]


def test_cancel_cancels_pending_nodes_and_a_running_steps_outcome_advances_nothing() -> None:
    run = chain(
        step(t.first_effect, "a"), step(t.effect, "b"), wait_signal("x"), step(t.effect, "c")
    ).enqueue()
    factories.run_due(now=clock())
    worker = uuid.uuid4()
    with connection.cursor() as cursor:
        [running] = store.claim(cursor, worker=worker, queues=["default"], limit=5, now=clock())
    assert cancel(run.id) == "cancelled"
    assert cancel(run.id) == "cancelled", "cancelling twice is harmless"
    with connection.cursor() as cursor:
        store.record_outcomes(
            cursor, worker=worker, outcomes=[{"id": str(running.id), "attempt": 1, "state": "succeeded"}]
        )
    run.refresh()
    assert run.status == "cancelled"
    assert [n.state for n in run.steps()] == ["succeeded", "succeeded", "cancelled"]
    assert [n.state for n in run.nodes if n.kind == "signal"] == ["cancelled"]
    assert factories.run_due(now=clock()) == []
    with pytest.raises(WorkflowNotFound):
        cancel(uuid.uuid4())


def test_a_failed_step_retried_continues_its_workflow() -> None:
    run = chain(step(t.add, 1, 1), step(t.flaky, "f", 3), step(t.add, 10)).enqueue()
    drive(run)
    assert run.status == "failed"
    dead = run.steps()[1]
    assert (dead.state, dead.attempt) == ("dead", 3)
    assert retry_step(dead.job_id) == "retried"
    assert run.refresh().status == "running"
    drive(run)
    assert run.status == "succeeded"
    assert run.result == 12
    assert retry_step(dead.job_id) == "the step is succeeded, not failed"


def test_a_failed_group_member_retried_brings_back_the_members_its_failure_cancelled() -> None:
    run = chain(
        group(step(t.flaky, 1, "g", 1).using(max_attempts=1), step(t.add, 2, 2)), step(t.collect)
    ).enqueue()
    ids = [n.job_id for n in run.steps()]
    Job.objects.filter(id=ids[1]).update(priority=-5)
    factories.run_due(now=clock(), limit=1)
    run.refresh()
    assert run.status == "failed"
    assert [n.state for n in run.steps()] == ["dead", "cancelled", "cancelled"]
    assert retry_step(ids[0]) == "retried"
    drive(run)
    assert run.status == "succeeded", run.error
    assert run.result == {"label": "", "values": [1, 4]}


def test_pruning_keeps_the_steps_of_workflows_under_way() -> None:
    from datetime import timedelta

    from jobs.states import State

    under_way = group(step(t.add, 1, 1), wait_signal("later")).enqueue()
    done = chain(step(t.add, 2, 2)).enqueue()
    drive(under_way)
    drive(done)
    kept, pruned = under_way.steps()[0].job_id, done.steps()[0].job_id
    later = clock() + timedelta(days=30)
    assert store.prune(retention={State.SUCCEEDED: 86400}, now=later) == 1
    assert Job.objects.filter(id=kept).exists()
    assert not Job.objects.filter(id=pruned).exists()
    assert under_way.signal("later", 9) == "delivered"
    assert under_way.refresh().result == [2, 9]


def test_finished_workflows_are_pruned_after_their_retention() -> None:
    from datetime import timedelta

    from jobs.models import Workflow as Row
    from jobs.models import WorkflowNode
    from jobs.store.workflows import prune_workflows

    finished = chain(step(t.add, 1, 1)).enqueue()
    waiting = chain(wait_signal("x")).enqueue()
    drive(finished)
    finished.signal("late", 1)
    retention = {"succeeded": 86400, "failed": 86400, "cancelled": 86400}
    with connection.cursor() as cursor:
        assert prune_workflows(cursor, retention=retention, now=clock() + timedelta(hours=1)) == 0
        assert prune_workflows(cursor, retention=retention, now=clock() + timedelta(days=2)) == 1
    assert list(Row.objects.values_list("id", flat=True)) == [waiting.id]
    assert not WorkflowNode.objects.filter(workflow_id=finished.id).exists()


def test_retry_is_refused_when_the_failure_cancelled_a_chain_inside_the_group() -> None:
    run = group(
        step(t.flaky, 1, "g", 1).using(max_attempts=1), chain(step(t.add, 1, 1), step(t.add, 1))
    ).enqueue()
    ids = [n.job_id for n in run.steps()]
    Job.objects.filter(id__in=ids[1:]).update(priority=-5)
    factories.run_due(now=clock(), limit=1)
    assert run.refresh().status == "failed"
    outcome = retry_step(ids[0])
    assert outcome.startswith("a chain or group inside its failed group was cancelled")
    assert run.refresh().status == "failed"
    assert Job.objects.get(id=ids[0]).state == "dead"
