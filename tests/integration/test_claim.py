"""The claim statement: what it picks, that concurrent claimers never share a row, and that
its plan walks the partial index while the table is full of finished jobs. Each holds for
both statements: claim.sql and claim_plain.sql (no limit declared), ``limits`` below."""

from __future__ import annotations

import json
import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs import store
from jobs.db import connect
from jobs.models import Job
from jobs.states import State
from jobs.store.outcomes import record_statement
from tests.support import factories
from tests.tasks import basic

T0 = timezone.now().replace(microsecond=0) + timedelta(days=1)


STATEMENTS = pytest.mark.parametrize("limits", [True, False], ids=["claim", "claim_plain"])


@pytest.fixture(autouse=True)
def no_limit_declared(request: pytest.FixtureRequest) -> None:
    """claim_plain.sql serves a database without limits (it reports any: tests of limits
    elsewhere leave theirs committed); removed in this test's transaction."""
    if "limits" in request.fixturenames and request.getfixturevalue("limits") is False:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM jobs_limit_state")
            cursor.execute("DELETE FROM jobs_limit")


def claim(
    *, queues=("default",), limit: int = 100, now=T0, worker: uuid.UUID | None = None, limits: bool = True
) -> list:
    with connection.cursor() as cursor:
        rows = store.claim(
            cursor, worker=worker or uuid.uuid4(), queues=list(queues), limit=limit, now=now, limits=limits
        )
    return [row[0] for row in rows]


@pytest.mark.django_db
@STATEMENTS
def test_only_due_queued_jobs_of_the_given_queues_are_claimed(limits: bool) -> None:
    due = factories.job(State.QUEUED, run_at=T0)
    factories.job(State.QUEUED, run_at=T0 + timedelta(microseconds=1))
    factories.job(State.QUEUED, run_at=T0, queue_name="email")
    for state in (State.RUNNING, State.SUCCEEDED, State.DEAD, State.CANCELLED):
        factories.job(state, now=T0 - timedelta(hours=1))
    assert claim(limits=limits) == [due.id]
    assert claim(limits=limits) == []


@pytest.mark.django_db
@STATEMENTS
def test_higher_priority_first_then_oldest_run_at(limits: bool) -> None:
    low = factories.job(State.QUEUED, priority=-5, run_at=T0 - timedelta(hours=2))
    old = factories.job(State.QUEUED, priority=0, run_at=T0 - timedelta(hours=1))
    new = factories.job(State.QUEUED, priority=0, run_at=T0 - timedelta(minutes=1))
    high = factories.job(State.QUEUED, priority=10, run_at=T0)
    order = [claim(limit=1, limits=limits)[0] for _ in range(4)]
    assert order == [high.id, old.id, new.id, low.id]


@pytest.mark.django_db
@STATEMENTS
def test_claim_takes_at_most_limit_rows_visiting_queues_in_the_order_given(limits: bool) -> None:
    email = [factories.job(State.QUEUED, queue_name="email", run_at=T0) for _ in range(2)]
    default = [factories.job(State.QUEUED, run_at=T0) for _ in range(5)]
    first = claim(queues=("email", "default"), limit=3, limits=limits)
    assert len(first) == 3
    assert set(first) > {j.id for j in email}
    second = claim(queues=("default", "email"), limit=3, limits=limits)
    assert len(second) == 3 and set(second) < {j.id for j in default}
    assert claim(queues=("email", "default"), limit=3, limits=limits) == list(
        {j.id for j in default} - set(first) - set(second)
    )
    assert Job.objects.filter(state=State.RUNNING).count() == 7


@pytest.mark.django_db
@STATEMENTS
def test_claim_uses_the_database_clock_without_now(limits: bool) -> None:
    soon = factories.job(State.QUEUED, run_at=timezone.now() - timedelta(seconds=1))
    factories.job(State.QUEUED, run_at=timezone.now() + timedelta(hours=1))
    assert claim(now=None, limits=limits) == [soon.id]


@pytest.mark.django_db
@STATEMENTS
@pytest.mark.parametrize("at", [T0, None], ids=["now given", "database clock"])
def test_a_claimed_row_tells_its_attempts_start_and_its_first(limits: bool, at: Any) -> None:
    # What the claim wrote on the row (last_attempted_at, started_at) is what the worker's
    # TaskResult reports, the first start only when it is not this one.
    job = factories.job(State.QUEUED, run_at=T0 - timedelta(days=2, seconds=3.25))

    def claimed(now: Any) -> Any:
        worker = uuid.uuid4()
        with connection.cursor() as cursor:
            [row] = store.claim(cursor, worker=worker, queues=["default"], limit=1, now=now, limits=limits)
        job.refresh_from_db()
        return row

    first = claimed(at)
    assert (first.attempted_at(), first.first_started_at) == (job.last_attempted_at, None)
    assert job.started_at == job.last_attempted_at
    if at is not None:
        assert job.last_attempted_at == T0
    # Back in the queue, as after a retry: the next claim starts a later attempt.
    retry_at = job.last_attempted_at - timedelta(seconds=0.123457)
    Job.objects.filter(id=job.id).update(state=State.QUEUED, run_at=retry_at)
    second = claimed(None if at is None else T0 + timedelta(minutes=5))
    assert (second.attempted_at(), second.first_started_at) == (job.last_attempted_at, job.started_at)
    assert second.first_started_at == first.attempted_at() != second.attempted_at()


@pytest.mark.django_db(transaction=True)
@STATEMENTS
def test_two_connections_claiming_at_once_never_get_the_same_row(limits: bool) -> None:
    total = 3000
    factories.insert_queued(total)
    everything = set(Job.objects.values_list("id", flat=True))
    barrier = Barrier(2)

    def claim_until_empty(seed: int) -> list[uuid.UUID]:
        rng = random.Random(seed)
        worker = uuid.uuid4()
        got: list[uuid.UUID] = []
        with connect(application_name=f"test-claimer-{seed}") as conn, conn.cursor() as cursor:
            barrier.wait(timeout=10)
            while rows := store.claim(
                cursor, worker=worker, queues=["default"], limit=rng.randint(1, 25), limits=limits
            ):
                got.extend(row[0] for row in rows)
        return got

    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.map(claim_until_empty, [1, 2])

    assert first and second, "both connections should have claimed a share"
    assert set(first).isdisjoint(second)
    assert len(first) + len(second) == total
    assert set(first) | set(second) == everything
    assert set(Job.objects.values_list("state", "attempt")) == {(State.RUNNING, 1)}


@pytest.mark.django_db(transaction=True)
@STATEMENTS
def test_a_claim_commits_without_waiting_for_the_disk_and_only_itself(limits: bool) -> None:
    # Its transaction alone: a crash of the server can lose it (the job is then queued
    # again, as for a dead worker); the outcome's commit, later, waits and flushes it.
    factories.insert_queued(2)
    with connect(application_name="test-claimer") as conn, conn.cursor() as cursor:
        assert store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=1, limits=limits)
        assert cursor.execute("SHOW synchronous_commit").fetchone() == ("on",)
        with conn.transaction():
            assert store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=1, limits=limits)
            assert cursor.execute("SHOW synchronous_commit").fetchone() == ("off",)
        assert cursor.execute("SHOW synchronous_commit").fetchone() == ("on",)


def _plan(sql: str, params: dict) -> str:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return "\n".join(line for (line,) in cursor.fetchall())


@pytest.mark.django_db
@STATEMENTS
def test_the_claim_plan_walks_the_partial_index_among_many_finished_rows(limits: bool) -> None:
    factories.insert_finished(100_000)
    factories.insert_queued(200)
    factories.insert_queued(50, queue_name="email")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    params = {
        "queues": ["email", "default"], "quotas": [10, 10], "limit": 10, "worker": uuid.uuid4(),
        "now": None, "lease_seconds": 300.0, "default_timeout": None, "unstarted_lease": 10.0,
    }  # fmt: skip

    statement = store.sql("claim" if limits else "claim_plain")
    custom = _plan("EXPLAIN " + statement, params)
    assert "jobs_job_claimable" in custom, custom
    assert "Seq Scan on jobs_job" not in custom, custom

    # A worker's connection prepares the statement once it repeats, and PostgreSQL may then
    # switch to a generic plan: that one must use the index as well.
    prepared = statement
    numbered = (
        ("queues", 1),
        ("quotas", 2),
        ("limit", 3),
        ("worker", 4),
        ("now", 5),
        ("lease_seconds", 6),
        ("default_timeout", 7),
        ("unstarted_lease", 8),
    )
    for name, number in numbered:
        prepared = prepared.replace(f"%({name})s", f"${number}")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(
            "PREPARE test_claim (text[], int[], int, uuid, timestamptz, float8, float8, float8) AS "
            + prepared
        )
    try:
        generic = _plan(
            "EXPLAIN EXECUTE test_claim(%(queues)s, %(quotas)s, %(limit)s, %(worker)s, %(now)s, "
            "%(lease_seconds)s, %(default_timeout)s, %(unstarted_lease)s)",
            params,
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE test_claim")
    assert "$5" in generic, generic  # the clock parameter is left open: a generic plan
    assert "jobs_job_claimable" in generic, generic
    assert "Seq Scan on jobs_job" not in generic, generic

    # And it claims what the plan promises, without touching the finished rows.
    assert len(claim(queues=("email", "default"), limit=10, now=None, limits=limits)) == 10


@pytest.mark.django_db
def test_a_job_without_its_own_lease_or_time_limit_gets_the_workers() -> None:
    plain = factories.job(State.QUEUED, run_at=T0, lease_seconds=None, timeout=None)
    own = factories.job(State.QUEUED, run_at=T0, lease_seconds=45, timeout=7)
    with connection.cursor() as cursor:
        rows = store.claim(
            cursor, worker=uuid.uuid4(), queues=["default"], limit=10, now=T0,
            lease_seconds=20, default_timeout=3, unstarted_lease=30,
        )  # fmt: skip
    returned = {row.id: (row.timeout, row.lease_seconds) for row in rows}
    assert returned == {plain.id: (3, 20), own.id: (7, 45)}
    # Until they start, the shorter of their lease and the claim lease.
    expiry = dict(Job.objects.filter(id__in=returned).values_list("id", "lease_expires_at"))
    assert expiry == {plain.id: T0 + timedelta(seconds=20), own.id: T0 + timedelta(seconds=30)}


def _buffers(plan: dict) -> int:
    """Shared buffers a plan node and its children touched (hit or read)."""
    own = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return max([own, *(_buffers(child) for child in plan.get("Plans", []))])


@pytest.mark.million_rows
@pytest.mark.django_db(transaction=True)
def test_claim_cost_does_not_grow_with_a_million_delayed_rows_of_higher_priority() -> None:
    # Future-dated jobs wait as 'scheduled', outside the claim's index: however many of
    # them there are, and whatever their priority, claiming a due job reads a few pages.
    # (Committed and vacuumed, as a live table is: rows that earlier tests rolled back
    # leave dead index entries until a vacuum.)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs, run_at,
                                  max_attempts)
            SELECT gen_random_uuid(), 'tests.tasks.basic.noop', 'default', 10, 'scheduled', '[]', '{}',
                   statement_timestamp() + interval '1 hour' + n * interval '1 millisecond', 3
            FROM generate_series(1, 1000000) AS n
            """
        )
        cursor.execute("VACUUM ANALYZE jobs_job")
    due = factories.job(State.QUEUED, priority=0, run_at=timezone.now() - timedelta(seconds=1))
    params = {
        "queues": ["default"], "quotas": [10], "limit": 10, "worker": uuid.uuid4(), "now": None,
        "lease_seconds": 300.0, "default_timeout": None, "unstarted_lease": 10.0,
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store.sql("claim"), params)
        [[plan]] = cursor.fetchall()
    text = str(plan)
    assert "jobs_job_claimable" in text and "Seq Scan" not in text
    # The claim's scan of the index: a handful of pages, not a walk over a million rows.
    scans = _index_scans(plan[0]["Plan"])
    assert scans and all(_buffers(scan) <= 10 for scan in scans), scans
    assert Job.objects.get(id=due.id).state == State.RUNNING


def _index_scans(plan: dict) -> list[dict]:
    found = [plan] if plan.get("Index Name") == "jobs_job_claimable" else []
    for child in plan.get("Plans", []):
        found.extend(_index_scans(child))
    return found


def _drained_backlog() -> None:
    # A backlog of 20,000 analysed as queued, then drained before autoanalyze comes by: a
    # plain NOT EXISTS was planned as a scan of the whole table, for every enqueue.
    factories.insert_queued(20_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("UPDATE jobs_job SET state = 'succeeded', finished_at = now()")


def _analysed_while_empty() -> None:
    # Autovacuum after a drained queue, or ANALYZE after a TRUNCATE: a scan of the table
    # and a sort look cheapest, and the prepared statement kept that plan as jobs came in.
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job CASCADE")
        cursor.execute("ANALYZE jobs_job")


def _table_reads() -> tuple[int, int]:
    """(sequential scans of jobs_job, rows fetched through its indexes) in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'jobs_job'"
        )
        scans, fetched = cursor.fetchone()
        return scans, fetched


@pytest.mark.django_db
@pytest.mark.parametrize("statistics", [_drained_backlog, _analysed_while_empty], ids=["drained", "empty"])
def test_the_enqueue_wake_up_check_never_scans_the_table_whatever_the_statistics(statistics: Any) -> None:
    statistics()
    before, _ = _table_reads()
    # Each enqueue statement: without options, with some, with a key, a small batch.
    for n in range(8):
        basic.add.enqueue(n, n)
        basic.add.using(priority=5).enqueue(n, n)
        basic.add.using(dedupe_key=f"key-{n}").enqueue(n, n)
        basic.add.enqueue_many([((n, n), {}), ((n, n + 1), {})])
    assert _table_reads()[0] == before


def _analysed_while_all(state: str) -> Any:
    # 20,000 rows analysed while all in ``state`` (a backlog of scheduled jobs, a busy
    # fleet), then finished before autoanalyze comes by.
    def statistics() -> None:
        factories.insert_queued(20_000)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE jobs_job SET state = %s, run_at = now() + interval '1 hour', "
                "lease_expires_at = now() + interval '1 hour', worker_id = gen_random_uuid()",
                [state],
            )
            cursor.execute("ANALYZE jobs_job")
            cursor.execute(
                "UPDATE jobs_job SET state = 'succeeded', finished_at = now(), "
                "lease_expires_at = NULL, worker_id = NULL"
            )

    return statistics


@pytest.mark.django_db
@pytest.mark.parametrize(
    "statistics",
    [
        _drained_backlog,
        _analysed_while_empty,
        _analysed_while_all("running"),
        _analysed_while_all("scheduled"),
    ],
    ids=["drained", "empty", "all-running", "all-scheduled"],
)
def test_the_housekeeping_reads_never_walk_the_table_whatever_the_statistics(statistics: Any) -> None:
    # Every poll interval and every reaper tick of every worker: the due check, the reaper
    # and the promoter each read a partial index's first entries, on a table of 22,000
    # finished rows and 500 queued ones, after each statistics trap above.
    statistics()
    factories.insert_finished(2_000)
    factories.insert_queued(500)
    scans, fetched = _table_reads()
    # More than psycopg's threshold, so the prepared statements' plans are the ones kept.
    for _ in range(8):
        with connection.cursor() as cursor:
            store.next_due(cursor)
            store.reap(cursor, backoff_base=1.0, backoff_cap=10.0)
            store.promote(cursor)
    scans_after, fetched_after = _table_reads()
    assert scans_after == scans
    assert fetched_after - fetched < 100


@pytest.mark.django_db
def test_the_fenced_writes_find_their_rows_by_primary_key_while_the_statistics_count_none_running() -> None:
    # A bulk enqueue analysed as all queued, then claimed: the statistics say no job runs.
    # Planned from the running rows (then jobs_job_lease), the outcome write re-read its whole
    # list of outcomes once per running row of every worker: 41 ms for 200 outcomes, not 6.
    factories.insert_queued(20_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    worker = uuid.uuid4()
    with connection.cursor() as cursor:
        rows = store.claim(cursor, worker=worker, queues=["default"], limit=200)
    pairs = [{"id": str(row.id), "attempt": row.attempt} for row in rows]
    outcomes = json.dumps([{**pair, "state": "succeeded", "result": None} for pair in pairs])
    params = {"worker": worker, "outcomes": outcomes, "started": json.dumps(pairs), "now": None,
              "lease_seconds": 300.0}  # fmt: skip
    # A batch that may hold workflow steps locks their workflows first: planned alike.
    assert "jobs_job_holder" not in _plan("EXPLAIN " + record_statement(steps=True), params)
    plan = _plan("EXPLAIN ANALYZE " + record_statement(steps=False), params)
    assert "jobs_job_holder" not in plan, plan
    assert plan.count("Index Scan using jobs_job_pkey") == 2, plan
    assert "actual time" in plan and "rows=200 loops=1" in plan, plan
    # The heartbeat and the progress write go by primary key as well.
    heartbeat = _plan(
        "EXPLAIN " + store.sql("extend_leases"),
        {
            "ids": [row.id for row in rows],
            "tokens": [worker] * len(rows),
            "now": None,
            "lease_seconds": 300.0,
        },
    )
    progress = _plan(
        "EXPLAIN " + store.sql("record_progress"),
        {
            "worker": worker,
            "now": None,
            "reports": json.dumps([{**pair, "progress": {"done": 1}} for pair in pairs]),
        },
    )
    for name, plan in (("heartbeat", heartbeat), ("progress", progress)):
        assert "jobs_job_holder" not in plan, (name, plan)
        assert "jobs_job_pkey" in plan, (name, plan)
