"""Every transition of jobs/states.py through the store, and the fence on writes after a claim.

Rows come from tests.support.factories in the state under test; the clock is moved with ``now=``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

from jobs import retry, store
from jobs.db import connect
from jobs.exceptions import JobNotFound, TransitionNotAllowed
from jobs.models import Job
from jobs.states import TRANSITIONS, State
from tests.support import factories
from tests.tasks import basic

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) + timedelta(days=1)
LEASE = factories.LEASE_SECONDS
BASE, CAP = 10.0, 600.0


def claim(*, worker: uuid.UUID | None = None, now=T0, limit: int = 10, queues=("default",)) -> list[Any]:
    with connection.cursor() as cursor:
        return store.claim(cursor, worker=worker or uuid.uuid4(), queues=list(queues), limit=limit, now=now)


def record(worker: uuid.UUID, *outcomes: dict[str, Any], now=T0) -> dict[uuid.UUID, str]:
    with connection.cursor() as cursor:
        return store.record_outcomes(cursor, worker=worker, outcomes=list(outcomes), now=now)


def reap(now) -> list[Any]:
    with connection.cursor() as cursor:
        return store.reap(cursor, backoff_base=BASE, backoff_cap=CAP, now=now)


def promote(now) -> dict[str, int]:
    with connection.cursor() as cursor:
        return store.promote(cursor, now=now)


def release(worker: uuid.UUID, ids=None) -> list[uuid.UUID]:
    with connection.cursor() as cursor:
        return store.release(cursor, worker=worker, ids=ids)


def extend(*held: tuple[uuid.UUID, uuid.UUID], now) -> set[uuid.UUID]:
    with connection.cursor() as cursor:
        return store.extend_leases(cursor, held=list(held), now=now).extended


def start(worker: uuid.UUID, job: Job, attempt: int) -> None:
    """Mark a claimed attempt as begun, as the executor does when its handler starts."""
    with connection.cursor() as cursor:
        store.record_outcomes(cursor, worker=worker, outcomes=[], started=[(job.id, attempt)])


def unstart(job: Job) -> None:
    """Make a running factory row one claimed in a batch and not begun yet."""
    Job.objects.filter(id=job.id, state=State.RUNNING).update(started_attempt=F("attempt") - 1)


def error(message: str = "boom") -> dict[str, str]:
    return {"exception": "builtins.RuntimeError", "message": message, "traceback": "Traceback ..."}


def succeeded(job: Job, *, attempt: int | None = None, result: Any = 1) -> dict[str, Any]:
    return {"id": str(job.id), "attempt": attempt or job.attempt, "state": "succeeded", "result": result}


def retried(job: Job, *, attempt: int | None = None, delay: float = 30.0) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "attempt": attempt or job.attempt,
        "state": "queued",
        "delay": delay,
        "error": error("try again"),
    }


def dead(job: Job, *, attempt: int | None = None) -> dict[str, Any]:
    return {"id": str(job.id), "attempt": attempt or job.attempt, "state": "dead", "error": error("fatal")}


def snoozed(job: Job, *, attempt: int | None = None, delay: float = 60.0) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "attempt": attempt or job.attempt,
        "state": "queued",
        "delay": delay,
        "refund": 1,
    }


def owner(job: Job) -> uuid.UUID:
    return job.worker_id or uuid.uuid4()


# --- the whole state machine: every operation on a row in every state -----------------

OPERATIONS: dict[str, Callable[[Job], object]] = {
    "claim": lambda job: claim(),
    "claim_expired": lambda job: (
        Job.objects.filter(id=job.id, state=State.QUEUED).update(expires_at=T0 - timedelta(seconds=1)),
        claim(),
    ),
    "succeed": lambda job: record(owner(job), succeeded(job)),
    "retry": lambda job: record(owner(job), retried(job)),
    "fail": lambda job: record(owner(job), dead(job)),
    "snooze": lambda job: record(owner(job), snoozed(job)),
    "retry_at_once": lambda job: record(owner(job), retried(job, delay=0)),
    "release": lambda job: (unstart(job), release(owner(job), [job.id])),
    "reap": lambda job: reap(T0 + timedelta(seconds=LEASE + 1)),
    "reap_unstarted": lambda job: (unstart(job), reap(T0 + timedelta(seconds=LEASE + 1))),
    "promote": lambda job: promote(T0 + timedelta(minutes=2)),
    "cancel": lambda job: store.cancel(job.id),
    # A running job's attempt ends after an operator asked it to stop.
    "retry_after_cancel": lambda job: (request_cancel(job), record(owner(job), retried(job))),
    "succeed_after_cancel": lambda job: (request_cancel(job), record(owner(job), succeeded(job))),
    "reap_after_cancel": lambda job: (request_cancel(job), reap(T0 + timedelta(seconds=LEASE + 1))),
    "discard": lambda job: store.discard(job.id),
    "replay": lambda job: store.replay(job.id),
    "run_now": lambda job: store.run_now(job.id),
    # The workflow functions (migration 0012_workflows): a step's node is reached, or fails.
    "workflow_reached": lambda job: workflow_sql("SELECT jobs_wf_queue_steps(%s, NULL, NULL, false)", job),
    "workflow_failed": lambda job: workflow_sql("SELECT jobs_wf_cancel_below(%s, 'failed')", job),
    "workflow_reopened": lambda job: reopen(job),
}
OPERATOR_ACTIONS = {"cancel", "discard", "replay", "run_now"}


def request_cancel(job: Job) -> None:
    # Only a running job takes a cancel request (store.cancel ends the others at once).
    Job.objects.filter(id=job.id, state=State.RUNNING).update(cancel_requested_at=T0)


def workflow_sql(statement: str, job: Job) -> None:
    with connection.cursor() as cursor:
        # A node the row is not in, for rows of no workflow: the statement finds nothing.
        cursor.execute(statement, [job.workflow_node or uuid.uuid4()])


def reopen(job: Job) -> None:
    """A retry reopening the chain the row is in (put there for the call, and taken out)."""
    node = uuid.uuid4()
    Job.objects.filter(id=job.id).update(workflow_node=node, workflow_position=1)
    workflow_sql("SELECT jobs_wf_rewait(%s, 0)", Job(workflow_node=node))
    Job.objects.filter(id=job.id).update(
        workflow_node=job.workflow_node, workflow_position=job.workflow_position
    )


# What each operation does to a row in a given state; every other pair changes nothing.
EXPECTED: dict[tuple[str, State], State] = {
    ("workflow_reached", State.WAITING): State.QUEUED,
    ("workflow_failed", State.WAITING): State.CANCELLED,
    ("workflow_reopened", State.CANCELLED): State.WAITING,
    ("promote", State.SCHEDULED): State.QUEUED,
    ("cancel", State.SCHEDULED): State.CANCELLED,
    ("discard", State.SCHEDULED): State.DEAD,
    ("run_now", State.SCHEDULED): State.QUEUED,
    ("claim", State.QUEUED): State.RUNNING,
    ("claim_expired", State.QUEUED): State.EXPIRED,
    ("cancel", State.QUEUED): State.CANCELLED,
    ("discard", State.QUEUED): State.DEAD,
    ("run_now", State.QUEUED): State.QUEUED,
    ("succeed", State.RUNNING): State.SUCCEEDED,
    ("retry", State.RUNNING): State.SCHEDULED,
    ("retry_at_once", State.RUNNING): State.QUEUED,
    ("snooze", State.RUNNING): State.SCHEDULED,
    ("release", State.RUNNING): State.QUEUED,
    ("reap", State.RUNNING): State.SCHEDULED,
    ("reap_unstarted", State.RUNNING): State.QUEUED,
    ("fail", State.RUNNING): State.DEAD,
    ("cancel", State.RUNNING): State.RUNNING,
    ("retry_after_cancel", State.RUNNING): State.CANCELLED,
    ("succeed_after_cancel", State.RUNNING): State.SUCCEEDED,
    ("reap_after_cancel", State.RUNNING): State.CANCELLED,
    ("replay", State.DEAD): State.QUEUED,
    ("replay", State.CANCELLED): State.QUEUED,
    ("replay", State.EXPIRED): State.QUEUED,
}


def test_every_transition_of_the_state_machine_has_an_operation() -> None:
    performed = {(state, to) for (_, state), to in EXPECTED.items() if state != to}
    assert performed == TRANSITIONS


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_operation_on_each_state_does_what_the_state_machine_allows(operation: str, state: State) -> None:
    job = factories.job(state, now=T0)
    before = factories.row(job.id)
    expected = EXPECTED.get((operation, state))
    if expected is None and operation in OPERATOR_ACTIONS:
        with pytest.raises(TransitionNotAllowed, match=f"job {job.id} is {state}"):
            OPERATIONS[operation](job)
    else:
        OPERATIONS[operation](job)
    after = factories.row(job.id)
    if expected is None:
        assert after == before
    else:
        assert after["state"] == expected
        if expected != state:
            assert (state, expected) in TRANSITIONS


@pytest.mark.parametrize("action", sorted(OPERATOR_ACTIONS))
def test_operator_actions_on_an_unknown_id_raise_job_not_found(action: str) -> None:
    missing = uuid.uuid4()
    with pytest.raises(JobNotFound, match=str(missing)):
        getattr(store, action)(missing)


# --- queued -> running: claim ------------------------------------------------------------


def test_claim_starts_an_attempt_under_a_lease() -> None:
    job = factories.job(State.QUEUED, now=T0, args=[1, 2], kwargs={"x": "y"}, priority=5, lease_seconds=45)
    worker = uuid.uuid4()
    [claimed] = claim(worker=worker)
    # Django's cursor hands jsonb over as text; the worker's own connection decodes it.
    assert (json.loads(claimed.args), json.loads(claimed.kwargs)) == ([1, 2], {"x": "y"})
    assert (claimed.id, claimed.task_path, claimed.attempt, claimed.max_attempts) == (
        job.id,
        factories.NOOP,
        1,
        3,
    )
    assert (claimed.timeout, claimed.lease_seconds, claimed.trace_id) == (None, 45.0, job.trace_id)
    assert (claimed.queue_name, claimed.priority, claimed.expired, claimed.handbacks) == (
        "default",
        5,
        False,
        0,
    )
    job.refresh_from_db()
    assert (job.state, job.attempt, job.worker_id, job.worker_ids) == (State.RUNNING, 1, worker, [worker])
    # Until its start is marked, the short claim lease; the mark gives it its own.
    assert job.lease_expires_at == T0 + timedelta(seconds=store.UNSTARTED_LEASE)
    assert job.started_at == job.last_attempted_at == T0
    with connection.cursor() as cursor:
        store.record_outcomes(cursor, worker=worker, outcomes=[], started=[(job.id, 1)], now=T0)
    job.refresh_from_db()
    assert (job.started_attempt, job.lease_expires_at) == (1, T0 + timedelta(seconds=45))


def test_claim_reads_a_job_of_its_own_trace_as_its_id() -> None:
    # A job that joined no trace has none stored: its trace is its id, which the claim
    # hands the worker (for its log lines and the jobs it enqueues in turn).
    job = factories.job(State.QUEUED, now=T0, trace_id="")
    [claimed] = claim(worker=uuid.uuid4())
    assert claimed.trace_id == job.id.hex


def test_a_second_claim_keeps_started_at_and_adds_a_token() -> None:
    earlier = T0 - timedelta(hours=1)
    job = factories.job(State.QUEUED, attempt=1, now=earlier, started_at=earlier, last_attempted_at=earlier)
    worker = uuid.uuid4()
    claim(worker=worker)
    job.refresh_from_db()
    assert job.attempt == 2
    assert job.worker_ids[1:] == [worker] and len(job.worker_ids) == 2
    assert (job.started_at, job.last_attempted_at) == (earlier, T0)


# --- running -> succeeded / queued / dead: record_outcomes --------------------------------


def test_success_stores_the_result_and_finishes_the_job() -> None:
    job = factories.job(State.RUNNING, now=T0)
    assert record(job.worker_id, succeeded(job, result={"sent": [1, 2]})) == {job.id: "succeeded"}
    job.refresh_from_db()
    assert (job.state, job.result, job.finished_at) == (State.SUCCEEDED, {"sent": [1, 2]}, T0)
    assert (job.worker_id, job.lease_expires_at, job.errors) == (None, None, [])


def test_retry_requeues_after_the_delay_with_the_error_kept() -> None:
    job = factories.job(State.RUNNING, now=T0, attempt=2)
    assert record(job.worker_id, retried(job, delay=30.5)) == {job.id: "scheduled"}
    after = Job.objects.get(id=job.id)
    assert (after.state, after.attempt, after.finished_at) == (State.SCHEDULED, 2, None)
    assert after.run_at == T0 + timedelta(seconds=30.5)
    assert (after.worker_id, after.lease_expires_at) == (None, None)
    assert after.last_error == "try again"
    assert len(after.errors) == 2
    assert after.errors[-1] | {"at": None, "started_at": None} == error("try again") | {
        "attempt": 2,
        "at": None,
        "started_at": None,
        "worker": str(job.worker_id),
    }
    assert after.errors[-1]["at"].startswith(T0.isoformat()[:19])
    # When the attempt began, for the console's attempt history.
    assert after.errors[-1]["started_at"] == job.last_attempted_at.isoformat()


def test_dead_finishes_the_job_with_the_error() -> None:
    job = factories.job(State.RUNNING, now=T0, attempt=3)
    record(job.worker_id, dead(job))
    job.refresh_from_db()
    assert (job.state, job.finished_at, job.last_error) == (State.DEAD, T0, "fatal")
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]


def test_snooze_requeues_without_using_the_attempt() -> None:
    job = factories.job(State.RUNNING, now=T0, attempt=2)
    tokens = job.worker_ids
    record(job.worker_id, snoozed(job, delay=60))
    job.refresh_from_db()
    assert (job.state, job.attempt, job.worker_ids) == (State.SCHEDULED, 1, tokens[:1])
    assert job.run_at == T0 + timedelta(seconds=60)
    # The start mark went back with the attempt: the next claim's attempt is not begun.
    assert job.started_attempt == 1
    assert len(job.errors) == 1


def test_outcomes_are_recorded_in_one_statement_each_under_its_own_fence() -> None:
    worker = uuid.uuid4()
    a, b, c = (factories.job(State.RUNNING, now=T0, worker=worker) for _ in range(3))
    other = factories.job(State.RUNNING, now=T0)
    changed = record(worker, succeeded(a), retried(b), dead(c), succeeded(other, result=2))
    assert changed == {a.id: "succeeded", b.id: "scheduled", c.id: "dead"}
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[a.id], states[b.id], states[c.id], states[other.id]) == (
        State.SUCCEEDED, State.SCHEDULED, State.DEAD, State.RUNNING,
    )  # fmt: skip


# --- running -> queued: release -------------------------------------------------------------


def test_release_gives_an_unstarted_job_back_without_using_the_attempt() -> None:
    worker = uuid.uuid4()
    started = factories.job(State.RUNNING, now=T0, worker=worker)
    unstarted = factories.job(State.RUNNING, now=T0, worker=worker, started=False)
    assert release(worker, [unstarted.id, started.id]) == [unstarted.id]
    unstarted.refresh_from_db()
    assert (unstarted.state, unstarted.attempt, unstarted.worker_ids) == (State.QUEUED, 0, [])
    assert (unstarted.worker_id, unstarted.lease_expires_at) == (None, None)
    assert [row[0] for row in claim()] == [unstarted.id]
    assert Job.objects.get(id=started.id).state == State.RUNNING


def test_release_of_everything_but_kept_jobs() -> None:
    worker = uuid.uuid4()
    keep = factories.job(State.RUNNING, worker=worker, started=False)
    give = factories.job(State.RUNNING, worker=worker, started=False)
    with connection.cursor() as cursor:
        assert store.release(cursor, worker=worker, keep=[keep.id]) == [give.id]
    assert Job.objects.get(id=keep.id).state == State.RUNNING


# --- running -> queued / dead: the reaper ----------------------------------------------------


def test_reaper_requeues_an_expired_job_after_backoff_and_keeps_the_attempt() -> None:
    job = factories.job(State.RUNNING, now=T0, attempt=2, max_attempts=3)
    later = T0 + timedelta(seconds=LEASE + 5)
    assert [(r.id, r.state, r.attempt, r.unstarted) for r in reap(later)] == [(job.id, "scheduled", 2, False)]
    after = Job.objects.get(id=job.id)
    assert (after.state, after.attempt, after.worker_id, after.lease_expires_at) == (
        State.SCHEDULED,
        2,
        None,
        None,
    )
    # Backoff for attempt 2 with base 10 is 20s, with equal jitter.
    assert later + timedelta(seconds=10) <= after.run_at <= later + timedelta(seconds=20)
    assert after.last_error == "worker lost"
    lost = after.errors[-1]
    assert (lost["attempt"], lost["exception"], lost["worker"]) == (
        2, "jobs.exceptions.WorkerLost", str(job.worker_id),
    )  # fmt: skip
    assert lost["message"].startswith("worker lost: lease expired at ")


def test_reaper_sends_a_job_on_its_last_attempt_to_dead() -> None:
    job = factories.job(State.RUNNING, now=T0, attempt=3, max_attempts=3)
    later = T0 + timedelta(seconds=LEASE + 5)
    assert [r[1] for r in reap(later)] == ["dead"]
    job.refresh_from_db()
    assert (job.state, job.attempt, job.finished_at) == (State.DEAD, 3, later)
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]


def test_reaper_caps_the_backoff_of_a_job_with_very_many_attempts() -> None:
    many = factories.job(State.RUNNING, now=T0, attempt=1100, max_attempts=10_000)
    other = factories.job(State.RUNNING, now=T0)
    later = T0 + timedelta(seconds=LEASE + 5)
    assert {row[0] for row in reap(later)} == {many.id, other.id}
    many.refresh_from_db()
    assert later + timedelta(seconds=CAP / 2) <= many.run_at <= later + timedelta(seconds=CAP)


@pytest.mark.parametrize(
    ("attempt", "base", "cap"),
    [
        (1, 10.0, 600.0),
        (2, 10.0, 600.0),
        (5, 1.5, 600.0),
        (7, 10.0, 600.0),
        (3, 0.25, 0.75),
        (80, 2.0, 3600.0),
    ],
)
@pytest.mark.parametrize("own_policy", [True, False], ids=["task_policy", "worker_policy"])
def test_reaper_backoff_is_retry_backoff(attempt: int, base: float, cap: float, own_policy: bool) -> None:
    """reap.sql spells retry.backoff in SQL: without jitter, the two agree exactly (the
    task's own base and cap on the row, else the worker's)."""
    columns = {"backoff_base": base, "backoff_cap": cap} if own_policy else {}
    job = factories.job(
        State.RUNNING, now=T0, attempt=attempt, max_attempts=attempt + 1, jitter=False, **columns
    )
    later = T0 + timedelta(seconds=LEASE + 5)
    with connection.cursor() as cursor:
        store.reap(cursor, backoff_base=base, backoff_cap=cap, now=later)
    job.refresh_from_db()
    assert job.state == State.SCHEDULED
    expected = retry.backoff(attempt, base=base, cap=cap, jitter=False)
    assert abs((job.run_at - later).total_seconds() - expected) < 1e-6


def test_reaper_gives_back_an_unstarted_job_unused_and_counts_the_handback() -> None:
    job = factories.job(State.RUNNING, now=T0, attempt=1, max_attempts=1, started=False)
    later = T0 + timedelta(seconds=LEASE + 5)
    assert [(r.id, r.state, r.attempt, r.unstarted) for r in reap(later)] == [(job.id, "queued", 0, True)]
    after = Job.objects.get(id=job.id)
    assert (after.state, after.attempt, after.handbacks, after.worker_ids) == (State.QUEUED, 0, 1, [])
    assert (after.run_at, after.errors, after.last_error) == (later, [], "")
    # Claimed again it carries its handback, so the executor marks its start before it runs.
    [claimed] = claim(now=later)
    assert (claimed.attempt, claimed.handbacks) == (1, 1)


def test_reaper_leaves_live_leases_and_the_grace_alone() -> None:
    job = factories.job(State.RUNNING, now=T0)
    before = factories.row(job.id)
    assert reap(T0 + timedelta(seconds=LEASE - 1)) == []
    assert reap(T0 + timedelta(seconds=LEASE)) == []
    assert reap(T0 + timedelta(seconds=LEASE + store.REAP_GRACE / 2)) == []
    assert factories.row(job.id) == before


def test_heartbeat_keeps_a_long_job_from_being_reaped() -> None:
    job = factories.job(State.RUNNING, now=T0)
    beat = T0 + timedelta(seconds=LEASE * 2 / 3)
    assert extend((job.id, job.worker_id), (uuid.uuid4(), uuid.uuid4()), now=beat) == {job.id}
    assert reap(T0 + timedelta(seconds=LEASE + 1)) == []
    job.refresh_from_db()
    assert (job.state, job.lease_expires_at) == (State.RUNNING, beat + timedelta(seconds=LEASE))


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_names_the_locked_jobs_to_retry_and_not_those_no_longer_held() -> None:
    free, locked, retaken = (factories.job(State.RUNNING, now=T0) for _ in range(3))
    Job.objects.filter(id=retaken.id).update(worker_id=uuid.uuid4())  # reaped and claimed again
    held = [(job.id, job.worker_id) for job in (free, locked, retaken)]
    with connect(application_name="test-locker") as locker:
        locker.autocommit = False
        locker.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [locked.id])
        with connection.cursor() as cursor:
            beat = store.extend_leases(cursor, held=held, now=T0 + timedelta(seconds=10))
    # The locked one is tried again soon; the one another worker holds is not (a heartbeat
    # used to retry it every 0.1 s for as long as its old handler ran).
    assert beat == store.Beat(extended={free.id}, locked={locked.id})
    assert {job.id: job.lease_expires_at for job in Job.objects.all()}[free.id] == T0 + timedelta(
        seconds=10 + LEASE
    )


# --- operator actions -------------------------------------------------------------------------


def test_cancel_of_a_queued_job_finishes_it() -> None:
    job = factories.job(State.QUEUED, now=T0)
    store.cancel(job.id)
    job.refresh_from_db()
    assert job.state == State.CANCELLED and job.finished_at is not None
    assert claim() == []


def test_cancel_of_a_running_job_waits_for_its_attempt_to_end() -> None:
    job = factories.job(State.RUNNING, now=T0)
    store.cancel(job.id)
    requested = factories.row(job.id)
    # Still running under its lease and claim: the handler may still be at work, and holds
    # its slot and its workflow step until its outcome is written.
    assert (requested["state"], requested["worker_id"], requested["lease_expires_at"]) == (
        State.RUNNING, job.worker_id, job.lease_expires_at,
    )  # fmt: skip
    assert requested["cancel_requested_at"] is not None
    store.cancel(job.id)
    assert factories.row(job.id) == requested, "asking twice changes nothing"
    assert extend((job.id, job.worker_id), now=T0 + timedelta(seconds=10)) == {job.id}
    with pytest.raises(TransitionNotAllowed):
        store.replay(job.id)
    assert record(job.worker_id, retried(job)) == {job.id: "cancelled"}
    cancelled = factories.row(job.id)
    assert (cancelled["state"], cancelled["worker_id"], cancelled["lease_expires_at"]) == (
        State.CANCELLED, None, None,
    )  # fmt: skip
    assert cancelled["finished_at"] is not None and cancelled["cancel_requested_at"] is None
    assert claim() == []
    store.replay(job.id)
    assert factories.row(job.id)["state"] == State.QUEUED


@pytest.mark.parametrize("outcome", [dead, snoozed, lambda job: retried(job, delay=0)])
def test_a_running_job_whose_cancel_was_requested_ends_cancelled_whatever_its_failure(outcome) -> None:
    job = factories.job(State.RUNNING, now=T0)
    store.cancel(job.id)
    assert record(job.worker_id, outcome(job)) == {job.id: "cancelled"}
    assert factories.row(job.id)["state"] == State.CANCELLED


def test_a_running_job_whose_cancel_was_requested_and_that_succeeded_stays_succeeded() -> None:
    job = factories.job(State.RUNNING, now=T0)
    store.cancel(job.id)
    assert record(job.worker_id, succeeded(job, result=7)) == {job.id: "succeeded"}
    done = factories.row(job.id)
    assert (done["state"], done["result"]) == (State.SUCCEEDED, 7)


def test_an_unstarted_job_whose_cancel_was_requested_is_not_released_back() -> None:
    job = factories.job(State.RUNNING, now=T0)
    unstart(job)
    store.cancel(job.id)
    assert release(job.worker_id) == [job.id]
    assert factories.row(job.id)["state"] == State.CANCELLED


def test_discard_sends_a_queued_job_to_dead_with_the_reason() -> None:
    job = factories.job(State.QUEUED, now=T0)
    store.discard(job.id, reason="customer closed the account")
    job.refresh_from_db()
    assert (job.state, job.last_error) == (State.DEAD, "customer closed the account")
    assert job.finished_at is not None


@pytest.mark.parametrize("state", [State.DEAD, State.CANCELLED])
def test_replay_queues_a_finished_job_with_fresh_attempts_and_its_history(state: State) -> None:
    job = factories.job(state, now=T0 - timedelta(days=3), attempt=2, max_attempts=2, dedupe_key="k")
    store.replay(job.id)
    after = Job.objects.get(id=job.id)
    assert (after.state, after.attempt, after.worker_ids) == (State.QUEUED, 0, [])
    assert (after.finished_at, after.result) == (None, None)
    assert after.errors == job.errors
    # Nobody else holds its dedupe key: it takes it back.
    assert not after.dedupe_lapsed
    assert [row[0] for row in claim(now=timezone.now() + timedelta(seconds=1))] == [job.id]


def test_replay_with_a_new_payload() -> None:
    job = factories.job(State.DEAD, args=[1], kwargs={"a": 1})
    store.replay(job.id, args=[2], kwargs={"b": 2})
    job.refresh_from_db()
    assert (job.args, job.kwargs) == ([2], {"b": 2})


def test_run_now_makes_a_delayed_job_due() -> None:
    job = factories.job(State.SCHEDULED, run_at=T0 + timedelta(days=30))
    assert claim(now=T0 + timedelta(days=1)) == []
    store.run_now(job.id)
    assert Job.objects.get(id=job.id).state == State.QUEUED
    assert [row[0] for row in claim(now=timezone.now() + timedelta(seconds=1))] == [job.id]


# --- the fence: a superseded claim cannot write --------------------------------------------


def superseded_outcomes(job: Job, attempt: int) -> list[dict[str, Any]]:
    return [
        succeeded(job, attempt=attempt),
        retried(job, attempt=attempt),
        dead(job, attempt=attempt),
        snoozed(job, attempt=attempt),
    ]


def test_a_worker_whose_lease_expired_and_whose_job_was_taken_over_cannot_write() -> None:
    job = factories.job(State.QUEUED, now=T0)
    first, second = uuid.uuid4(), uuid.uuid4()
    claim(worker=first)
    start(first, job, 1)
    reaped_at = T0 + timedelta(seconds=LEASE + 1)
    assert [r.state for r in reap(reaped_at)] == ["scheduled"]
    promote(reaped_at + timedelta(seconds=CAP))
    retaken_at = reaped_at + timedelta(seconds=CAP)
    assert [r[0] for r in claim(worker=second, now=retaken_at)] == [job.id]
    current = factories.row(job.id)
    assert (current["worker_id"], current["attempt"]) == (second, 2)

    for outcome in superseded_outcomes(job, attempt=1):
        assert record(first, outcome, now=retaken_at) == {}
    # Not even with the current attempt number: the token is not the owner's.
    for outcome in superseded_outcomes(job, attempt=2):
        assert record(first, outcome, now=retaken_at) == {}
    assert release(first) == []
    assert release(first, [job.id]) == []
    assert extend((job.id, first), now=retaken_at) == set()
    assert factories.row(job.id) == current

    job.refresh_from_db()
    assert record(second, succeeded(job, attempt=2)) == {job.id: "succeeded"}


def test_the_same_worker_cannot_write_for_an_older_attempt() -> None:
    job = factories.job(State.QUEUED, now=T0)
    worker = uuid.uuid4()
    claim(worker=worker)
    start(worker, job, 1)
    reaped_at = T0 + timedelta(seconds=LEASE + 1)
    reap(reaped_at)
    promote(reaped_at + timedelta(seconds=CAP))
    claim(worker=worker, now=reaped_at + timedelta(seconds=CAP))
    current = factories.row(job.id)
    assert current["attempt"] == 2
    for outcome in superseded_outcomes(job, attempt=1):
        assert record(worker, outcome) == {}
    assert factories.row(job.id) == current
    assert record(worker, succeeded(job, attempt=2)) == {job.id: "succeeded"}


def test_an_outcome_is_recorded_once() -> None:
    job = factories.job(State.RUNNING, now=T0)
    assert record(job.worker_id, succeeded(job, result=1)) == {job.id: "succeeded"}
    done = factories.row(job.id)
    for outcome in (succeeded(job, result=2), retried(job), dead(job), snoozed(job)):
        assert record(job.worker_id, outcome) == {}
    assert factories.row(job.id) == done


def test_a_reaped_job_waiting_for_retry_cannot_be_written_by_its_old_worker() -> None:
    job = factories.job(State.RUNNING, now=T0)
    reap(T0 + timedelta(seconds=LEASE + 1))
    waiting = factories.row(job.id)
    for outcome in superseded_outcomes(job, attempt=1):
        assert record(job.worker_id, outcome) == {}
    assert release(job.worker_id) == []
    assert factories.row(job.id) == waiting


# --- pruning ------------------------------------------------------------------------------------


def test_prune_deletes_finished_jobs_past_their_states_retention_only() -> None:
    old, recent = T0 - timedelta(days=10), T0 - timedelta(days=1)
    gone = [factories.job(State.SUCCEEDED, now=old), factories.job(State.CANCELLED, now=old)]
    kept = [
        factories.job(State.SUCCEEDED, now=recent),
        factories.job(State.DEAD, now=old),
        factories.job(State.QUEUED, now=old),
        factories.job(State.RUNNING, now=old),
    ]
    day = 86400.0
    retention = {State.SUCCEEDED: 7 * day, State.DEAD: 30 * day, State.CANCELLED: 7 * day}
    assert store.prune(retention=retention, now=T0, batch=1) == 2
    assert set(Job.objects.values_list("id", flat=True)) == {j.id for j in kept}
    assert not Job.objects.filter(id__in=[j.id for j in gone]).exists()


def test_prune_reaches_jobs_made_before_ids_were_time_ordered() -> None:
    # Rows from before migration 0008 have random (version 4) ids, below every time-ordered
    # one or above them all: pruning's two ranges of ids reach both.
    old = T0 - timedelta(days=10)
    low, high = (uuid.UUID(first + uuid.uuid4().hex[2:]) for first in ("00", "ff"))
    legacy = [factories.job(State.SUCCEEDED, now=old, id=job_id) for job_id in (low, high)]
    kept = factories.job(State.SUCCEEDED, now=T0, id=uuid.UUID("ff" + uuid.uuid4().hex[2:]))
    # A retention reaching back before 1970 keeps everything.
    assert store.prune(retention={State.SUCCEEDED: 100 * 365 * 86400.0}, now=T0) == 0
    assert store.prune(retention={State.SUCCEEDED: 7 * 86400.0}, now=T0) == 2
    assert list(Job.objects.values_list("id", flat=True)) == [kept.id]
    assert all(job.id.version == 4 for job in legacy)


def test_reaper_retries_a_lost_job_on_its_tasks_backoff() -> None:
    job = factories.job(
        State.RUNNING, now=T0, attempt=2, max_attempts=5, backoff_base=100.0, backoff_cap=150.0
    )
    later = T0 + timedelta(seconds=LEASE + 5)
    reap(later)
    job.refresh_from_db()
    # Attempt 2 on base 100 is 200 s, capped at 150, with equal jitter: 75..150 s.
    assert later + timedelta(seconds=75) <= job.run_at <= later + timedelta(seconds=150)


def test_enqueue_keeps_the_tasks_own_backoff_and_leaves_the_rest_to_the_worker() -> None:
    own = basic.fail_always.enqueue()
    plain = basic.add.enqueue(1, 2)
    rows = dict(Job.objects.values_list("id", "backoff_base").filter(id__in=[own.id, plain.id]))
    assert rows == {uuid.UUID(own.id): 10.0, uuid.UUID(plain.id): None}
