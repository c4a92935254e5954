"""Signal waits: delivered after or before the wait is reached, timeouts with the clock
moved (the housekeeper's statement), bad input refused."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection

from jobs import store
from jobs.exceptions import InvalidPayload
from jobs.models import Job, WorkflowSignal
from jobs.store import workflows as workflow_store
from jobs.workflows import InvalidCanvas, WorkflowNotFound, chain, group, send_signal, step, wait_signal
from tests.support import factories
from tests.tasks import workflows as t

from .workflow_support import clock, drive, effects, prepare_effects

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _effects() -> None:
    prepare_effects()


def expire(now) -> int:
    with connection.cursor() as cursor:
        return workflow_store.expire_signals(cursor, now=now)


def test_a_wait_holds_no_job_and_the_signal_payload_becomes_its_result() -> None:
    run = chain(step(t.add, 1, 2), wait_signal("approval", timeout=3600), step(t.collect, "after")).enqueue()
    drive(run)
    assert run.status == "running"
    [wait] = [n for n in run.nodes if n.kind == "signal"]
    assert wait.state == "running"
    # Nothing is claimable while the workflow waits.
    assert not Job.objects.filter(state__in=["queued", "running", "scheduled"]).exists()
    assert factories.run_due(now=clock()) == []
    assert send_signal(run.id, "approval", {"approved": True, "by": "ann"}) == "delivered"
    drive(run)
    assert run.status == "succeeded"
    assert run.result == {"label": "after", "values": {"approved": True, "by": "ann"}}


def test_a_signal_sent_before_the_wait_is_reached_is_kept_and_delivered_there() -> None:
    run = chain(step(t.first_effect, "a"), wait_signal("go"), step(t.collect)).enqueue()
    assert run.signal("go", [1, 2]) == "kept"
    assert run.signal("other", "ignored") == "kept"
    drive(run)
    assert run.status == "succeeded"
    assert run.result == {"label": "", "values": [1, 2]}
    assert WorkflowSignal.objects.get(name="go").node is not None
    assert WorkflowSignal.objects.get(name="other").node is None


def test_two_waits_for_one_name_take_one_signal_each() -> None:
    run = group(wait_signal("vote"), wait_signal("vote")).enqueue()
    assert run.signal("vote", "yes") == "delivered"
    assert run.refresh().status == "running"
    assert run.signal("vote", "no") == "delivered"
    assert run.refresh().status == "succeeded"
    assert sorted(run.result) == ["no", "yes"]


def test_a_wait_times_out_when_the_clock_passes_its_deadline() -> None:
    run = chain(wait_signal("approval", timeout=24 * 3600), step(t.effect, "never")).enqueue()
    now = clock()
    assert expire(now + timedelta(hours=23)) == 0
    assert run.refresh().status == "running"
    assert expire(now + timedelta(hours=24, seconds=1)) == 1
    run.refresh()
    assert run.status == "failed"
    assert run.error == "timeout: no 'approval' signal within 86400 s"
    assert [n.state for n in run.steps()] == ["cancelled"]
    # A signal after the timeout is recorded and changes nothing.
    assert run.signal("approval", True) == "ignored"
    assert run.refresh().status == "failed"
    assert effects() == []


def test_the_housekeepers_next_due_reading_includes_the_earliest_wait_timeout() -> None:
    chain(wait_signal("a", timeout=60)).enqueue()
    with connection.cursor() as cursor:
        due = store.next_due(cursor)
    assert due.signal_timeout is not None
    assert timedelta(seconds=50) < due.signal_timeout - due.now <= timedelta(seconds=60)


def test_a_signal_to_an_unknown_workflow_is_refused() -> None:
    with pytest.raises(WorkflowNotFound):
        send_signal(uuid.uuid4(), "approval", {})
    with pytest.raises(WorkflowNotFound):
        send_signal("not-a-uuid", "approval", {})


def test_a_bad_signal_is_refused_and_loses_nothing() -> None:
    run = chain(wait_signal("approval"), step(t.collect)).enqueue()
    with pytest.raises(InvalidPayload):
        run.signal("approval", {1: "keys must be strings"})
    with pytest.raises(InvalidCanvas):
        run.signal("", {})
    assert not WorkflowSignal.objects.exists()
    assert run.signal("approval", {"ok": 1}) == "delivered"
    drive(run)
    assert run.result == {"label": "", "values": {"ok": 1}}
