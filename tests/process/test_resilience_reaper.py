"""The reaper and the fence, driven statement by statement on real PostgreSQL.

Each test plays the parts of workers, reapers and operators on separate connections and
moves the database clock with ``now=`` instead of sleeping through leases. Row locks held
in open transactions make the races happen in a chosen order.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobs import store
from jobs.db import connect
from tests.support.workers import job, wait_until
from tests.tasks import basic, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("transactional_db")]

BACKOFF = {"backoff_base": 10.0, "backoff_cap": 1000.0}


@pytest.fixture
def conns() -> Iterator[list[psycopg.Connection]]:
    """Three autocommit connections to the test database, like separate processes."""
    opened = [connect(application_name="test-resilience") for _ in range(3)]
    yield opened
    for conn in opened:
        conn.close()


def db_now(conn: psycopg.Connection) -> datetime:
    return conn.execute("SELECT now()").fetchone()[0]


def claim_one(conn: psycopg.Connection, token: uuid.UUID, now: datetime) -> store.Claimed:
    """Claim the one due job and begin it, as an executor does."""
    store.promote(conn.cursor(), now=now)
    rows = store.claim(conn.cursor(), worker=token, queues=["default"], limit=1, now=now)
    assert len(rows) == 1
    store.record_outcomes(conn.cursor(), worker=token, outcomes=[], started=[(rows[0].id, rows[0].attempt)])
    return rows[0]


def waiting_for_locks(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    ).fetchone()[0]


def succeeded(job_id: Any, attempt: int, result: Any = None) -> dict[str, Any]:
    return {"id": str(job_id), "attempt": attempt, "state": "succeeded", "result": result}


def test_worker_that_lost_its_lease_cannot_overwrite_the_new_owner(conns: list[psycopg.Connection]) -> None:
    old_worker, new_worker, reaper = conns
    job_id = uuid.UUID(basic.add.enqueue(1, 2).id)
    old, new = uuid.uuid4(), uuid.uuid4()
    t0 = db_now(reaper)

    claim_one(old_worker, old, t0)
    # The old worker stalls past its lease (300 s); a reaper takes the job back.
    assert [r[0] for r in store.reap(reaper.cursor(), now=t0 + timedelta(seconds=301), **BACKOFF)] == [job_id]
    assert claim_one(new_worker, new, t0 + timedelta(seconds=400)).attempt == 2

    # The old worker wakes up: nothing it writes lands.
    cursor = old_worker.cursor()
    assert store.record_outcomes(cursor, worker=old, outcomes=[succeeded(job_id, 1, "stale")]) == {}
    assert store.record_outcomes(cursor, worker=old, outcomes=[succeeded(job_id, 2, "stale")]) == {}
    assert store.extend_leases(cursor, held=[(job_id, old)]) == store.Beat(extended=set(), locked=set())
    assert store.release(cursor, worker=old) == []
    assert (job(job_id).state, job(job_id).worker_id) == ("running", new)

    assert store.record_outcomes(new_worker.cursor(), worker=new, outcomes=[succeeded(job_id, 2, 3)]) == {
        job_id: "succeeded"
    }
    done = job(job_id)
    assert (done.state, done.result, done.attempt) == ("succeeded", 3, 2)


def test_same_token_cannot_record_an_attempt_it_lost(conns: list[psycopg.Connection]) -> None:
    worker, reaper, _ = conns
    job_id = uuid.UUID(basic.add.enqueue(1, 2).id)
    token = uuid.uuid4()
    t0 = db_now(reaper)
    claim_one(worker, token, t0)
    store.reap(reaper.cursor(), now=t0 + timedelta(seconds=301), **BACKOFF)
    # The same executor claims the job again: the outcome of its first attempt is stale.
    assert claim_one(worker, token, t0 + timedelta(seconds=400)).attempt == 2
    assert store.record_outcomes(worker.cursor(), worker=token, outcomes=[succeeded(job_id, 1)]) == {}
    assert store.record_outcomes(worker.cursor(), worker=token, outcomes=[succeeded(job_id, 2)]) == {
        job_id: "succeeded"
    }


def test_reaper_requeues_expired_jobs_with_backoff_then_marks_them_dead(
    conns: list[psycopg.Connection],
) -> None:
    worker, reaper, _ = conns
    expiring = uuid.UUID(resilience.spin.enqueue("x").id)  # max_attempts=2
    token = uuid.uuid4()
    t0 = db_now(reaper)
    claim_one(worker, token, t0)
    lease = job(expiring).lease_expires_at

    # Not yet expired: untouched.
    assert store.reap(reaper.cursor(), now=lease - timedelta(seconds=1), **BACKOFF) == []
    assert job(expiring).state == "running"

    t1 = lease + timedelta(seconds=1)
    assert store.reap(reaper.cursor(), now=t1, **BACKOFF) == [
        (expiring, "scheduled", resilience.spin.module_path, 1, False, "default")
    ]
    back = job(expiring)
    assert (back.state, back.attempt, back.worker_id, back.lease_expires_at) == ("scheduled", 1, None, None)
    # Equal jitter on the first backoff step: between half of and the full base.
    assert timedelta(seconds=5) <= back.run_at - t1 <= timedelta(seconds=10)
    assert back.last_error == "worker lost"
    assert [(e["exception"], e["attempt"], e["worker"]) for e in back.errors] == [
        ("jobs.exceptions.WorkerLost", 1, str(token))
    ]

    # Its last attempt is lost as well: dead, with the reason.
    t2 = back.run_at + timedelta(seconds=1)
    claim_one(worker, token, t2)
    t3 = t2 + timedelta(seconds=400)
    assert store.reap(reaper.cursor(), now=t3, **BACKOFF) == [
        (expiring, "dead", resilience.spin.module_path, 2, False, "default")
    ]
    dead = job(expiring)
    assert (dead.state, dead.attempt, dead.last_error, dead.finished_at) == ("dead", 2, "worker lost", t3)
    assert len(dead.errors) == 2


def test_two_reapers_at_once_take_each_job_once(conns: list[psycopg.Connection]) -> None:
    worker, first, second = conns
    ids = {uuid.UUID(r.id) for r in basic.noop.enqueue_many([((), {})] * 50)}
    token = uuid.uuid4()
    t0 = db_now(worker)
    rows = store.claim(worker.cursor(), worker=token, queues=["default"], limit=50, now=t0)
    store.record_outcomes(
        worker.cursor(), worker=token, outcomes=[], started=[(r.id, r.attempt) for r in rows]
    )
    later = t0 + timedelta(seconds=301)

    # The first reaper is in the middle of its statement's transaction, rows locked...
    first.execute("BEGIN")
    taken_first = {r[0] for r in store.reap(first.cursor(), now=later, limit=20, **BACKOFF)}
    # ...the second neither waits for it nor takes the same rows.
    taken_second = {r[0] for r in store.reap(second.cursor(), now=later, **BACKOFF)}
    first.execute("COMMIT")

    assert len(taken_first) == 20
    assert taken_first.isdisjoint(taken_second)
    assert taken_first | taken_second == ids
    assert store.reap(second.cursor(), now=later, **BACKOFF) == []
    assert {len(job(i).errors) for i in ids} == {1}


def test_job_completing_while_the_reaper_looks_stays_completed(conns: list[psycopg.Connection]) -> None:
    worker, reaper, _ = conns
    job_id = uuid.UUID(basic.add.enqueue(2, 2).id)
    token = uuid.uuid4()
    t0 = db_now(reaper)
    claim_one(worker, token, t0)
    # The lease is overdue, but the worker is writing the outcome right now.
    later = t0 + timedelta(seconds=301)

    worker.execute("BEGIN")
    assert store.record_outcomes(worker.cursor(), worker=token, outcomes=[succeeded(job_id, 1, 4)]) == {
        job_id: "succeeded"
    }
    assert store.reap(reaper.cursor(), now=later, **BACKOFF) == []
    worker.execute("COMMIT")

    assert store.reap(reaper.cursor(), now=later, **BACKOFF) == []
    done = job(job_id)
    assert (done.state, done.result, done.errors) == ("succeeded", 4, [])


def test_outcome_arriving_after_the_reaper_took_the_job_is_dropped(conns: list[psycopg.Connection]) -> None:
    worker, reaper, watcher = conns
    job_id = uuid.UUID(basic.add.enqueue(2, 2).id)
    token = uuid.uuid4()
    t0 = db_now(reaper)
    claim_one(worker, token, t0)

    reaper.execute("BEGIN")
    assert len(store.reap(reaper.cursor(), now=t0 + timedelta(seconds=301), **BACKOFF)) == 1
    changed: list[dict[uuid.UUID, str]] = []
    writer = threading.Thread(
        target=lambda: changed.append(
            store.record_outcomes(worker.cursor(), worker=token, outcomes=[succeeded(job_id, 1, 4)])
        )
    )
    writer.start()
    # The late outcome waits for the reaper's row lock...
    wait_until(lambda: waiting_for_locks(watcher) == 1)
    reaper.execute("COMMIT")
    writer.join(timeout=5)

    # ...and then finds the job no longer running under its claim.
    assert changed == [{}]
    back = job(job_id)
    assert (back.state, back.result, back.last_error) == ("scheduled", None, "worker lost")


def test_claimed_job_is_leased_briefly_until_its_start_is_marked(conns: list[psycopg.Connection]) -> None:
    worker, reaper, _ = conns
    quick = uuid.UUID(basic.add.enqueue(1, 2).id)
    token = uuid.uuid4()
    t0 = db_now(reaper)
    short = timedelta(seconds=store.UNSTARTED_LEASE)

    # Claimed, not started: leased for the short claim lease, not the worker's 300 s.
    [row] = store.claim(worker.cursor(), worker=token, queues=["default"], limit=1, now=t0)
    assert job(quick).lease_expires_at == t0 + short
    assert store.reap(reaper.cursor(), now=t0 + short, **BACKOFF) == []
    # Its worker died before starting it: back, unused, as soon as that lease is over.
    [back] = store.reap(reaper.cursor(), now=t0 + short + timedelta(seconds=1), **BACKOFF)
    assert (back.id, back.state, back.attempt, back.unstarted) == (quick, "queued", 0, True)

    # Claimed again and started: the start mark extends the lease to the full length.
    t1 = t0 + timedelta(seconds=20)
    [row] = store.claim(worker.cursor(), worker=token, queues=["default"], limit=1, now=t1)
    store.record_outcomes(worker.cursor(), worker=token, outcomes=[], started=[(row.id, row.attempt)], now=t1)
    assert job(quick).lease_expires_at == t1 + timedelta(seconds=300)
    assert store.reap(reaper.cursor(), now=t1 + short + timedelta(seconds=1), **BACKOFF) == []


def test_claim_lease_is_the_jobs_own_when_that_is_shorter(conns: list[psycopg.Connection]) -> None:
    worker, reaper, _ = conns
    hanging = uuid.UUID(resilience.hang_on_first_attempt.enqueue("x").id)  # lease_seconds=1.5
    t0 = db_now(reaper)
    store.claim(worker.cursor(), worker=uuid.uuid4(), queues=["default"], limit=1, now=t0)
    assert job(hanging).lease_expires_at == t0 + timedelta(seconds=1.5)
