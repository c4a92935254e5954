"""Chains, groups and chords on real PostgreSQL: results, order, nesting, failure policy.

Steps run with the worker's own attempt code (tests.support.factories.run_due) on the test's
connection; the advancing happens in the statement that records their outcomes.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobs.models import Job, WorkflowNode
from jobs.states import State
from jobs.workflows import InvalidCanvas, chain, chord, group, step, wait_signal
from jobs.workflows.runs import Workflow, WorkflowNotFound
from tests.support import factories
from tests.tasks import workflows as t

from .workflow_support import clock, drive, effects, prepare_effects

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _effects() -> None:
    prepare_effects()


def test_a_chain_passes_each_result_to_the_next_step() -> None:
    run = chain(step(t.add, 1, 2), step(t.times, 10), step(t.add, 5)).enqueue(name="math")
    assert run.status == "running"
    states = [n.state for n in run.steps()]
    assert states == ["queued", "waiting", "waiting"], "only the first step is claimable"
    drive(run)
    assert run.status == "succeeded"
    assert run.result == 35
    assert [n.result for n in run.steps()] == [3, 30, 35]
    assert Job.objects.get(id=run.steps()[1].job_id).args == [3, 10]


def test_a_step_never_runs_before_its_input_exists() -> None:
    run = chain(step(t.first_effect, "a"), step(t.effect, "b")).enqueue()
    outcomes = factories.run_due(now=clock())
    assert len(outcomes) == 1, "one claim takes only the first step"
    assert effects() == ["a"]
    factories.run_due(now=clock())
    assert effects() == ["a", "b"]
    assert run.refresh().result == "a"


def test_a_group_runs_in_parallel_and_returns_results_in_order() -> None:
    run = group(*(step(t.add, i, i) for i in range(6))).enqueue()
    assert {n.state for n in run.steps()} == {"queued"}
    # Finish them out of order: the last three first.
    ids = [n.job_id for n in run.steps()]
    Job.objects.filter(id__in=ids[:3]).update(priority=-5)
    factories.run_due(now=clock(), limit=3)
    assert run.refresh().status == "running"
    drive(run)
    assert run.result == [0, 2, 4, 6, 8, 10]


def test_a_chord_callback_gets_the_list_of_results_once() -> None:
    run = chord(
        group(step(t.add, 1, 1), step(t.add, 2, 2), step(t.add, 3, 3)), step(t.collect, "sum")
    ).enqueue()
    drive(run)
    assert run.status == "succeeded"
    assert run.result == {"label": "sum", "values": [2, 4, 6]}
    assert Job.objects.filter(task_path__endswith="workflows.collect").count() == 1


def test_nested_canvases() -> None:
    flow = chain(
        step(t.add, 0, 1),  # 1, given to each member of the group
        group(
            step(t.add, 10),  # 11
            chain(step(t.effect, "inner"), step(t.times, 3)),  # 3
            chord(group(step(t.add, 100), step(t.add, 200)), step(t.collect)),
        ),
        step(t.collect, "all"),
    )
    run = flow.enqueue()
    drive(run)
    assert run.status == "succeeded", run.error
    assert run.result == {
        "label": "all",
        "values": [11, 3, {"label": "", "values": [101, 201]}],
    }


def test_an_empty_group_succeeds_with_an_empty_list() -> None:
    run = chain(step(t.add, 1, 1), group(), step(t.collect)).enqueue()
    drive(run)
    assert run.result == {"label": "", "values": []}


def test_a_dead_step_fails_the_workflow_and_cancels_what_follows() -> None:
    run = chain(step(t.add, 1, 1), step(t.fail), step(t.effect, "never")).enqueue()
    drive(run)
    assert run.status == "failed"
    assert "this step always fails" in run.error
    assert [n.state for n in run.steps()] == ["succeeded", "dead", "cancelled"]
    assert "never" not in effects()


def test_a_failing_step_follows_its_retry_policy_before_the_workflow_fails() -> None:
    run = chain(step(t.flaky, 7, "f", 2), step(t.add, 1)).enqueue()
    drive(run)
    assert run.status == "succeeded"
    assert run.result == 8
    assert run.steps()[0].attempt == 3
    assert effects().count("try:f") == 3


def test_a_group_fails_fast_by_default_and_cancels_pending_members() -> None:
    members = [step(t.fail), *(step(t.effect, 1, f"m{i}") for i in range(3))]
    run = chain(group(*members), step(t.collect)).enqueue()
    # Only the failing member is claimed: the others stay queued until it is dead.
    ids = [n.job_id for n in run.steps()]
    Job.objects.filter(id__in=ids[1:4]).update(priority=-5)
    factories.run_due(now=clock(), limit=1)
    run.refresh()
    assert run.status == "failed"
    assert [n.state for n in run.steps()] == ["dead", "cancelled", "cancelled", "cancelled", "cancelled"]
    assert effects() == []


def test_a_group_that_waits_for_all_fails_only_when_every_member_finished() -> None:
    members = [step(t.fail), *(step(t.effect, 1, f"m{i}") for i in range(3))]
    run = chain(group(*members, fail_fast=False), step(t.collect)).enqueue()
    ids = [n.job_id for n in run.steps()]
    Job.objects.filter(id__in=ids[1:4]).update(priority=-5)
    factories.run_due(now=clock(), limit=1)
    assert run.refresh().status == "running"
    drive(run)
    assert run.status == "failed"
    assert run.error == "1 of 4 members failed"
    assert sorted(effects()) == ["m0", "m1", "m2"]
    assert run.steps()[-1].state == "cancelled"


def test_enqueue_is_part_of_the_callers_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        run = chain(step(t.add, 1, 2), step(t.add, 3)).enqueue()
        raise RuntimeError("roll back")
    with pytest.raises(WorkflowNotFound):
        Workflow(run.id)
    assert not Job.objects.filter(workflow_node__isnull=False).exists()


def test_bad_canvases_and_arguments_are_refused_at_enqueue_and_leave_nothing() -> None:
    with pytest.raises(InvalidCanvas):
        chain(step(t.add, 1, 2), "not a node")  # type: ignore[arg-type]
    with pytest.raises(InvalidCanvas):
        step(len)  # type: ignore[arg-type]
    with pytest.raises(InvalidCanvas):
        wait_signal("approval", timeout=-1)
    with pytest.raises(InvalidCanvas, match="run_after"):
        chain(step(t.add, 1, 2).using(run_after=timezone.now() + timedelta(hours=1))).enqueue()
    # times() after add() gets one argument more than it can take.
    with pytest.raises(Exception, match="signature"):
        chain(step(t.add, 1, 2), step(t.times, 3, 4)).enqueue()
    assert not WorkflowNode.objects.exists()
    assert not Job.objects.exists()


def test_plain_jobs_do_not_touch_workflow_tables() -> None:
    from tests.tasks import basic

    result = basic.add.enqueue(1, 2)
    factories.run_due(now=clock())
    assert Job.objects.get(id=result.id).state == State.SUCCEEDED
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_workflow")
        assert cursor.fetchone()[0] == 0


# Committed and flushed (TRUNCATE) rather than rolled back: a thousand rolled-back rows would
# leave dead entries in the claim's index for the tests after it (test_claim reads its pages).
@pytest.mark.django_db(transaction=True)
def test_a_wide_chord_joins_once_with_every_result_in_order() -> None:
    members = 1000
    run = chord(group(*(step(t.add, i, 1) for i in range(members))), step(t.collect, "wide")).enqueue()
    assert Job.objects.filter(state="queued").count() == members
    drive(run, limit=100)
    assert run.status == "succeeded"
    assert run.result == {"label": "wide", "values": list(range(1, members + 1))}
    assert Job.objects.filter(task_path__endswith=".collect").count() == 1


def test_steps_under_a_concurrency_limit_wait_their_turn_inside_a_group() -> None:
    from jobs.limits import registry
    from jobs.models import LimitState
    from tests.tasks import limited

    registry.forget()
    run = group(*(step(limited.two_at_a_time, f"c{i}") for i in range(4))).enqueue()
    decisions = [row["state"] for row in factories.run_due(now=clock(), limit=10)]
    assert len(decisions) == 2, "two start, the others wait for a slot without using an attempt"
    assert LimitState.objects.filter(limit_name="task:tests.tasks.limited.two_at_a_time").exists()
    drive(run)
    assert run.status == "succeeded"
    assert run.result == [None] * 4
    assert sorted(effects()) == ["c0", "c1", "c2", "c3"]
