"""Enqueue through Django's task API: transactional, deduplicated, bulk, validated."""

from __future__ import annotations

import enum
import math
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.tasks import TaskResultStatus, task, task_backends
from django.tasks.exceptions import InvalidTask
from django.test.utils import override_settings
from django.utils import timezone

from jobs import store
from jobs.backend import JobResult, PostgresBackend
from jobs.db import connect
from jobs.exceptions import InvalidPayload
from jobs.models import Job
from jobs.options import JobOptions
from jobs.states import State
from tests.support import factories
from tests.tasks import basic, engine


class Rollback(Exception):
    pass


def count_elsewhere(job_id: str) -> int:
    """How many rows with this id another connection can see."""
    with connect(application_name="test-observer") as conn:
        return conn.execute("SELECT count(*) FROM jobs_job WHERE id = %s", [job_id]).fetchone()[0]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement sent on any psycopg cursor: enqueue uses a raw cursor on Django's
    connection, which Django's query capture does not see."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def spy(self: psycopg.Cursor, query: Any, params: Any = None, **options: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, params, **options)

    copy = psycopg.Cursor.copy

    def copy_spy(self: psycopg.Cursor, statement: Any, params: Any = None, **options: Any) -> Any:
        sent.append(str(statement))
        return copy(self, statement, params, **options)

    monkeypatch.setattr(psycopg.Cursor, "execute", spy)
    monkeypatch.setattr(psycopg.Cursor, "copy", copy_spy)
    return sent


def inserts(statements: list[str]) -> list[str]:
    return [s for s in statements if "INSERT INTO jobs_job" in s or "COPY jobs_job" in s]


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return [loop]


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


# --- transactional enqueue ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_enqueue_leaves_no_job() -> None:
    with pytest.raises(Rollback), transaction.atomic():
        result = basic.add.enqueue(1, 2)
        assert Job.objects.filter(id=result.id).exists()
        raise Rollback
    assert not Job.objects.filter(id=result.id).exists()
    assert count_elsewhere(result.id) == 0


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_is_visible_to_others_only_once_committed() -> None:
    with transaction.atomic():
        result = basic.add.enqueue(1, 2)
        assert count_elsewhere(result.id) == 0
    assert count_elsewhere(result.id) == 1


@pytest.mark.django_db(transaction=True)
def test_workers_are_woken_on_commit_only_and_only_for_due_jobs() -> None:
    with connect(application_name="test-listener") as listener:
        listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")

        def woken() -> list[str]:
            return [n.payload for n in listener.notifies(timeout=0.3, stop_after=1)]

        with pytest.raises(Rollback), transaction.atomic():
            basic.add.enqueue(1, 2)
            raise Rollback
        assert woken() == []
        basic.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
        assert woken() == []
        basic.add.using(queue_name="email").enqueue(1, 2)
        assert woken() == ["email"]

        backend: PostgresBackend = task_backends["default"]
        later = basic.add.using(run_after=timezone.now() + timedelta(hours=1))
        backend.bulk_enqueue([(later, [1, 2], {}), (later.using(queue_name="push"), [1, 2], {})])
        assert woken() == []
        email, push = basic.add.using(queue_name="email"), basic.add.using(queue_name="push")
        backend.bulk_enqueue([(email, [1, 2], {}), (push, [1, 2], {}), (email, [3, 4], {})])
        # One wake-up per queue that received due work (a batch commits after its check).
        assert sorted(n.payload for n in listener.notifies(timeout=0.3)) == ["email", "push"]


@pytest.mark.django_db(transaction=True)
def test_a_large_batch_goes_through_copy_with_the_same_guarantees() -> None:
    size = store.COPY_THRESHOLD * 3
    later = basic.add.using(run_after=timezone.now() + timedelta(hours=1))
    with connect(application_name="test-listener") as listener:
        listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
        with pytest.raises(Rollback), transaction.atomic():
            rolled_back = basic.add.enqueue_many(([i, i], {}) for i in range(size))
            raise Rollback
        assert not Job.objects.filter(id__in=[r.id for r in rolled_back]).exists()
        later.enqueue_many(([i, i], {}) for i in range(size))
        assert list(listener.notifies(timeout=0.3)) == []

        with transaction.atomic():
            results = basic.add.using(queue_name="email").enqueue_many(([i, i], {}) for i in range(size))
            assert list(listener.notifies(timeout=0.2)) == []
        assert [n.payload for n in listener.notifies(timeout=0.3)] == ["email"]
    jobs = {str(j.id): j for j in Job.objects.filter(queue_name="email")}
    assert [jobs[r.id].args for r in results] == [[i, i] for i in range(size)]
    # Rows without run_after are due at the database's now(), like a single enqueue.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_job WHERE queue_name = 'email' AND run_at > now()")
        assert cursor.fetchone()[0] == 0
    assert Job.objects.filter(run_at__gt=timezone.now() + timedelta(minutes=59)).count() == size


@pytest.mark.django_db(transaction=True)
def test_a_large_batch_outside_a_transaction_wakes_workers_only_once_its_rows_are_visible() -> None:
    # Autocommit: the COPY and the wake-up are two statements. Each used to commit on its
    # own, so an idle worker was woken before the rows existed, found nothing and slept a
    # poll interval. Another session's SHARE lock holds the COPY, before the wake-up.
    size = store.COPY_THRESHOLD * 2
    with (
        connect(application_name="test-listener") as listener,
        connect(application_name="test-blocker") as blocker,
    ):
        listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
        blocker.autocommit = False
        blocker.execute("LOCK TABLE jobs_job IN SHARE MODE")

        def enqueue() -> list[JobResult]:
            try:
                return basic.add.enqueue_many(([i, i], {}) for i in range(size))
            finally:
                connection.close()  # this thread's

        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(enqueue)
            try:
                early = list(listener.notifies(timeout=0.5))
            finally:
                blocker.rollback()
            results = batch.result(timeout=10)
        assert early == []
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["default"]
        visible = listener.execute(
            "SELECT count(*) FROM jobs_job WHERE id = ANY(%s::uuid[])", [[r.id for r in results]]
        ).fetchone()[0]
        assert visible == size


@pytest.mark.django_db(transaction=True)
def test_a_large_batch_outside_a_transaction_is_all_or_nothing() -> None:
    # A batch of bare rows (one COPY) and delayed ones (another): the second fails, the
    # first must not stay.
    later = basic.add.using(run_after=timezone.now() + timedelta(hours=1))
    backend: PostgresBackend = task_backends["default"]
    calls = [(basic.add, [i, i], {}) for i in range(store.COPY_THRESHOLD)]
    calls += [(later, [i, i], {}) for i in range(store.COPY_THRESHOLD)]
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE jobs_job ADD CONSTRAINT test_no_scheduled CHECK (state <> 'scheduled') NOT VALID"
        )
    try:
        with pytest.raises(psycopg.errors.CheckViolation):
            backend.bulk_enqueue(calls)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE jobs_job DROP CONSTRAINT test_no_scheduled")
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_batch_made_while_it_is_copied_is_whole_ordered_and_wakes_once(statements: list[str]) -> None:
    # enqueue_many of one task outside a transaction: each job is made while PostgreSQL
    # inserts the ones before it (store.copy_jobs_as_made).
    size = store.COPY_THRESHOLD * 20
    with connect(application_name="test-listener") as listener:
        listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
        statements.clear()
        results = basic.add.using(queue_name="email").enqueue_many(([i], {"b": i}) for i in range(size))
        assert [n.payload for n in listener.notifies(timeout=0.3)] == ["email"]
    assert sum("COPY" in statement for statement in statements) == 1
    jobs = {str(job.id): job for job in Job.objects.all()}
    assert len(jobs) == size
    assert [(jobs[r.id].args, jobs[r.id].kwargs) for r in results] == [([i], {"b": i}) for i in range(size)]
    assert [(r.args, r.kwargs) for r in results] == [([i], {"b": i}) for i in range(size)]
    # The order they were enqueued in is the order they are claimed in.
    assert [r.id for r in results] == sorted(r.id for r in results)
    assert {r.status for r in results} == {TaskResultStatus.READY}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("bad", [0, 1, 700, 999], ids=["first", "second", "middle", "last"])
def test_a_bad_call_in_a_batch_made_while_copied_inserts_nothing(bad: int) -> None:
    calls: list[tuple[list[Any], dict[str, Any]]] = [([i, i], {}) for i in range(1000)]
    calls[bad] = ([{1, 2}, 3], {})
    with connect(application_name="test-listener") as listener:
        listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
        with pytest.raises(InvalidPayload, match="JSON-serializable"):
            basic.add.enqueue_many(calls)
        assert list(listener.notifies(timeout=0.2)) == []
    assert Job.objects.count() == 0
    # The connection goes on as before: outside a transaction, the next batch lands.
    assert len(basic.add.enqueue_many(([i, i], {}) for i in range(100))) == Job.objects.count() == 100


@pytest.mark.django_db
def test_in_the_callers_transaction_a_bad_call_is_refused_before_any_statement(statements: list[str]) -> None:
    calls: list[tuple[list[Any], dict[str, Any]]] = [([i, i], {}) for i in range(1000)]
    calls[700] = ([{1, 2}, 3], {})
    with transaction.atomic():
        basic.noop.enqueue()
        statements.clear()
        with pytest.raises(InvalidPayload):
            basic.add.enqueue_many(calls)
        assert statements == []
        # The caller's own work stands, and its transaction goes on.
        assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_copy_as_made_refuses_a_transaction_and_rows_it_cannot_take() -> None:
    connection.ensure_connection()
    cursor = connection.connection.cursor()
    with transaction.atomic(), pytest.raises(ValueError, match="outside any transaction"):
        store.copy_jobs_as_made(cursor, copy_job(0), [])
    with pytest.raises(ValueError, match="without dedupe key"):
        store.copy_jobs_as_made(cursor, copy_job(0, dedupe_key="k"), [])
    assert Job.objects.count() == 0


# --- what enqueue stores --------------------------------------------------------------------


@pytest.mark.django_db
def test_enqueue_stores_the_task_its_options_and_payload() -> None:
    run_after = timezone.now() + timedelta(minutes=5)
    result = basic.fail_always.using(priority=7, queue_name="low", run_after=run_after).enqueue(message="x")
    assert isinstance(result, JobResult)
    assert (result.status, result.args, result.kwargs, result.deduplicated) == (
        TaskResultStatus.READY, [], {"message": "x"}, False,
    )  # fmt: skip
    uuid.UUID(result.id)
    job = Job.objects.get(id=result.id)
    assert (job.task_path, job.queue_name, job.priority, job.state) == (
        "tests.tasks.basic.fail_always", "low", 7, State.SCHEDULED,
    )  # fmt: skip
    assert (job.args, job.kwargs, job.run_at, job.attempt) == ([], {"message": "x"}, run_after, 0)
    # No lease or time limit of its own: the worker's settings apply when it is claimed.
    assert (job.max_attempts, job.timeout, job.lease_seconds) == (3, None, None)
    # It joined no trace, so it starts its own, its id, which the row does not repeat.
    assert job.trace_id == ""


@pytest.mark.django_db
@override_settings(JOBS={"DEFAULT_MAX_ATTEMPTS": 9, "LEASE_SECONDS": 60.0, "DEFAULT_TIMEOUT": 20.0})
def test_unset_options_come_from_settings_and_set_ones_win() -> None:
    plain = Job.objects.get(id=basic.add.enqueue(1, 2).id)
    # Attempts are fixed at enqueue; lease and time limit are the worker's at claim time.
    assert (plain.max_attempts, plain.lease_seconds, plain.timeout) == (9, None, None)
    own = basic.add.using(max_attempts=2, lease_seconds=30, timeout=5, trace_id="t-1").enqueue(1, 2)
    job = Job.objects.get(id=own.id)
    assert (job.max_attempts, job.lease_seconds, job.timeout, job.trace_id) == (2, 30.0, 5.0, "t-1")


@pytest.mark.django_db
def test_a_delayed_job_is_claimable_only_from_run_after() -> None:
    run_after = timezone.now() + timedelta(hours=2)
    result = basic.add.using(run_after=run_after).enqueue(1, 2)
    assert Job.objects.get(id=result.id).state == State.SCHEDULED
    with connection.cursor() as cursor:
        assert store.promote(cursor, now=run_after - timedelta(seconds=1)) == {}
        early = store.claim(
            cursor, worker=uuid.uuid4(), queues=["default"], limit=5, now=run_after - timedelta(seconds=1)
        )
        assert store.promote(cursor, now=run_after) == {"default": 1}
        due = store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=5, now=run_after)
    assert early == []
    assert [row[0] for row in due] == [uuid.UUID(result.id)]


# --- dedupe keys ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_second_enqueue_with_the_key_returns_the_unfinished_job() -> None:
    keyed = basic.add.using(dedupe_key="invoice:7")
    first = keyed.enqueue(1, 2)
    second = keyed.enqueue(5, 6)
    assert (first.deduplicated, second.deduplicated) == (False, True)
    assert second.id == first.id
    assert second.args == [1, 2]
    with connection.cursor() as cursor:
        store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=1)
    running = keyed.enqueue(1, 2)
    assert (running.id, running.deduplicated, running.status) == (first.id, True, TaskResultStatus.RUNNING)
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_another_key_or_no_key_is_a_new_job() -> None:
    a = basic.add.using(dedupe_key="a").enqueue(1, 2)
    b = basic.add.using(dedupe_key="b").enqueue(1, 2)
    plain = [basic.add.enqueue(1, 2).id for _ in range(2)]
    assert len({a.id, b.id, *plain}) == 4


@pytest.mark.django_db
def test_once_the_holder_finished_the_key_makes_a_new_job() -> None:
    keyed = basic.add.using(dedupe_key="report")
    first = keyed.enqueue(1, 2)
    factories.run_due(now=timezone.now() + timedelta(seconds=1))
    assert Job.objects.get(id=first.id).state == State.SUCCEEDED
    again = keyed.enqueue(1, 2)
    assert (again.deduplicated, again.id != first.id) == (False, True)


@pytest.mark.django_db
def test_a_dead_or_cancelled_holder_releases_the_key() -> None:
    keyed = basic.add.using(dedupe_key="k")
    first = keyed.enqueue(1, 2)
    store.cancel(first.id)
    second = keyed.enqueue(1, 2)
    assert not second.deduplicated
    store.discard(second.id)
    assert not keyed.enqueue(1, 2).deduplicated


def new_job(key: str | None, window: float | None) -> store.NewJob:
    return store.NewJob(
        id=uuid.uuid4(), task_path="tests.tasks.basic.noop", queue_name="default", priority=0,
        args="[]", kwargs="{}", run_at=None, options=JobOptions(max_attempts=3, lease_seconds=300.0),
        dedupe_key=key, dedupe_window=window,
    )  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("batch", [False, True], ids=["single-row insert", "bulk insert"])
def test_a_dedupe_window_holds_the_key_only_that_long(batch: bool) -> None:
    t0 = timezone.now()

    def insert(at: datetime) -> tuple[uuid.UUID, datetime | None]:
        # With a keyless job beside it the row goes through the bulk statement.
        jobs = [new_job("digest", 60), new_job(None, None)] if batch else [new_job("digest", 60)]
        with connection.cursor() as cursor:
            return store.insert_jobs(cursor, jobs, now=at)[0]

    first, created = insert(t0)
    assert created
    assert insert(t0 + timedelta(seconds=59)) == (first, None)
    later, created = insert(t0 + timedelta(seconds=60))
    assert created and later != first
    assert insert(t0 + timedelta(seconds=90)) == (later, None)
    # The first job still runs; it just no longer holds the key.
    old = Job.objects.get(id=first)
    assert (old.state, old.dedupe_lapsed) == (State.QUEUED, True)
    assert Job.objects.get(id=later).dedupe_until == t0 + timedelta(seconds=120)


@pytest.mark.django_db
def test_a_dedupe_window_through_the_task_api() -> None:
    keyed = basic.add.using(dedupe_key="daily", dedupe_window=3600)
    first = keyed.enqueue(1, 2)
    assert keyed.enqueue(1, 2).deduplicated
    Job.objects.filter(id=first.id).update(dedupe_until=timezone.now() - timedelta(seconds=1))
    second = keyed.enqueue(1, 2)
    assert not second.deduplicated
    assert keyed.enqueue(1, 2).id == second.id


def enqueue_in_thread(start: threading.Barrier, key: str) -> JobResult:
    try:
        start.wait(timeout=10)
        return basic.add.using(dedupe_key=key).enqueue(1, 2)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_with_one_key_make_exactly_one_job() -> None:
    callers = 8
    start = threading.Barrier(callers)
    with ThreadPoolExecutor(max_workers=callers) as pool:
        results = list(pool.map(lambda _: enqueue_in_thread(start, "race"), range(callers)))
    assert Job.objects.filter(dedupe_key="race").count() == 1
    assert {r.id for r in results} == {str(Job.objects.get(dedupe_key="race").id)}
    assert sorted(r.deduplicated for r in results) == [False] + [True] * (callers - 1)


@pytest.mark.django_db(transaction=True)
def test_enqueues_waiting_on_a_holder_that_rolls_back_make_exactly_one_job() -> None:
    holding = threading.Event()
    callers = 6

    def holder() -> str:
        try:
            with pytest.raises(Rollback), transaction.atomic():
                result = basic.add.using(dedupe_key="held").enqueue(1, 2)
                holding.set()
                # Long enough for the others to queue up behind this row's key.
                threading.Event().wait(0.3)
                raise Rollback
            return result.id
        finally:
            connection.close()

    def waiter() -> JobResult:
        try:
            holding.wait(timeout=10)
            return basic.add.using(dedupe_key="held").enqueue(1, 2)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=callers + 1) as pool:
        rolled_back = pool.submit(holder)
        results = [f.result() for f in [pool.submit(waiter) for _ in range(callers)]]
    [survivor] = Job.objects.filter(dedupe_key="held")
    assert str(survivor.id) != rolled_back.result()
    assert {r.id for r in results} == {str(survivor.id)}
    assert sorted(r.deduplicated for r in results) == [False] + [True] * (callers - 1)


# --- bulk enqueue -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_enqueue_many_inserts_every_job_in_one_statement(statements: list[str]) -> None:
    results = basic.add.enqueue_many(([i, i], {}) for i in range(500))
    # One COPY of every row, then one statement that wakes the workers (sent at commit)
    # and reads the rows' created_at.
    assert len(inserts(statements)) == 1 and inserts(statements)[0].startswith("COPY jobs_job")
    assert len(statements) == 2 and "pg_notify" in statements[1]
    assert [r.args for r in results] == [[i, i] for i in range(500)]
    assert len({r.id for r in results}) == 500
    stored = dict(Job.objects.values_list("id", "args"))
    assert all(stored[uuid.UUID(r.id)] == r.args for r in results)
    assert basic.add.enqueue_many([]) == []


@pytest.mark.django_db
def test_bulk_results_and_rows_are_what_a_single_enqueue_gives() -> None:
    nested = {"a": [1, 2]}
    single = basic.echo.enqueue(1, opts=nested)
    many = basic.echo.enqueue_many([((1,), {"opts": nested})] * 100)
    # The payload as stored, not the caller's objects: changing them later changes nothing.
    nested["a"].append(3)
    for result in [single, *many]:
        assert (result.args, result.kwargs) == ([1], {"opts": {"a": [1, 2]}})
        assert (result.status, result.deduplicated, result.progress, result.worker_ids) == (
            TaskResultStatus.READY,
            False,
            None,
            [],
        )
        assert result.enqueued_at is not None and result.backend == "default"
    # The COPY of option-less rows leaves the options to the columns' defaults, as the
    # single INSERT does.
    columns = (
        "state", "timeout", "lease_seconds", "backoff_base", "backoff_cap", "jitter", "soft_timeout",
        "non_retryable", "owner", "public", "expires_at", "attempt", "max_attempts", "priority",
    )  # fmt: skip
    rows = {repr(row[1:]) for row in Job.objects.values_list("id", *columns)}
    assert len(rows) == 1, rows


@pytest.mark.django_db
def test_bulk_enqueue_handles_dedupe_keys_within_the_batch_and_against_the_table(
    statements: list[str],
) -> None:
    backend: PostgresBackend = task_backends["default"]
    existing = basic.add.using(dedupe_key="held").enqueue(0, 0)
    a, b = basic.add.using(dedupe_key="a"), basic.noop.using(dedupe_key="b")
    calls = [
        (a, [1, 1], {}),
        (basic.add, [2, 2], {}),
        (a, [3, 3], {}),
        (b, [], {}),
        (basic.add.using(dedupe_key="held"), [4, 4], {}),
        (basic.add, [5, 5], {}),
        (b, [], {}),
    ]
    statements.clear()
    results = backend.bulk_enqueue(calls)
    assert len(inserts(statements)) == 1
    ids = [r.id for r in results]
    assert [r.deduplicated for r in results] == [False, False, True, False, True, False, True]
    assert ids[2] == ids[0] and ids[6] == ids[3] and ids[4] == existing.id
    assert len(set(ids)) == 5
    assert Job.objects.count() == 5
    assert Job.objects.get(id=ids[0]).args == [1, 1]


@pytest.mark.django_db
def test_a_copied_batch_with_keys_beside_it_gives_each_call_its_own_result() -> None:
    # The results are made while the COPY's rows are written, as if all were new; the keyed
    # calls that found a holder get the holder's result in their place.
    backend: PostgresBackend = task_backends["default"]
    held = basic.add.using(dedupe_key="held").enqueue(0, 0)
    keyed = basic.add.using(dedupe_key="held")
    calls: list[tuple[Any, list[int], dict[str, Any]]] = [
        (basic.add, [i, i], {}) for i in range(store.COPY_THRESHOLD)
    ]
    calls[7] = (keyed, [7, 7], {})
    calls[30] = (basic.add.using(dedupe_key="fresh"), [30, 30], {})
    calls[31] = (basic.add.using(dedupe_key="fresh"), [31, 31], {})
    calls.append((basic.add.using(priority=5), [99, 99], {}))
    results = backend.bulk_enqueue(calls)
    assert [r.deduplicated for r in results].count(True) == 2
    assert results[7].id == held.id and results[7].args == [0, 0] and results[7].deduplicated
    assert results[31].id == results[30].id and results[31].args == [30, 30]
    rows = {str(job.id): job for job in Job.objects.all()}
    assert len(rows) == 1 + len(calls) - 2  # the held job, and every call but the two that found one
    for index, result in enumerate(results):
        assert rows[result.id].args == result.args, index
        assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    assert rows[results[-1].id].priority == 5


def copy_job(index: int, timeout: float | None = None, dedupe_key: str | None = None) -> store.NewJob:
    return store.NewJob(
        id=uuid.uuid4(), task_path="tests.tasks.basic.noop", queue_name="default", priority=0,
        args=f"[{index}]", kwargs="{}", run_at=None, options=JobOptions(max_attempts=3, timeout=timeout),
        dedupe_key=dedupe_key,
    )  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param(lambda: [copy_job(0)], id="one row"),
        pytest.param(lambda: [copy_job(0, dedupe_key="k"), copy_job(1)], id="keyed rows"),
        pytest.param(lambda: [copy_job(i) for i in range(store.COPY_THRESHOLD)], id="copy"),
        pytest.param(
            lambda: (
                [copy_job(i, timeout=5.0 if i % 2 else None) for i in range(store.COPY_THRESHOLD)]
                + [copy_job(-1, dedupe_key="k")]
            ),
            id="two copies and a keyed row",
        ),
    ],
)
def test_meanwhile_runs_once_and_its_error_comes_after_the_rows(jobs: Any) -> None:
    batch = jobs()
    calls: list[int] = []

    def meanwhile() -> None:
        calls.append(1)
        raise ValueError("made in meanwhile")

    with transaction.atomic():
        with connection.cursor() as cursor, pytest.raises(ValueError, match="made in meanwhile"):
            store.insert_jobs(cursor, batch, meanwhile=meanwhile)
        # The caller's transaction is not aborted: the rows are there and it goes on.
        assert Job.objects.filter(id__in=[job.id for job in batch]).count() == len(batch)
    assert calls == [1]


@pytest.mark.django_db
def test_a_copy_ended_while_meanwhile_runs_leaves_the_cursor_in_step() -> None:
    # The COPY's result lands on psycopg's cursor (not on Django's wrapper): the statement
    # after it, on the same cursor, reads the rows' times and has its own row count.
    batch = [copy_job(i) for i in range(store.COPY_THRESHOLD)]
    calls: list[int] = []
    with connection.cursor() as cursor:
        outcome = store.insert_jobs(cursor, batch, meanwhile=lambda: calls.append(1))
        assert cursor.cursor.rowcount == 1
    assert calls == [1]
    stored = dict(Job.objects.values_list("id", "created_at"))
    assert outcome == [(job.id, stored[job.id]) for job in batch]


@pytest.mark.django_db(transaction=True)
def test_a_copy_that_fails_raises_its_own_error_whatever_meanwhile_did() -> None:
    batch = [copy_job(i) for i in range(store.COPY_THRESHOLD)]
    batch[-1].id = batch[0].id  # a primary key the COPY refuses

    def meanwhile() -> None:
        raise ValueError("made in meanwhile")

    with connection.cursor() as cursor, pytest.raises(psycopg.errors.UniqueViolation):
        store.insert_jobs(cursor, batch, meanwhile=meanwhile)
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_enqueue_many_with_a_key_makes_one_job() -> None:
    results = basic.add.using(dedupe_key="once").enqueue_many([([1, 1], {}), ([2, 2], {})])
    assert results[0].id == results[1].id
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_a_bad_call_in_a_batch_inserts_nothing() -> None:
    with pytest.raises(InvalidPayload):
        basic.add.enqueue_many([([1, 2], {}), ([{1, 2}, 3], {})])
    assert Job.objects.count() == 0


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ([{1, 2}], {}, "args must be JSON-serializable: Object of type set is not JSON serializable"),
        (
            [],
            {"a": object()},
            "kwargs must be JSON-serializable: Object of type object is not JSON serializable",
        ),
        ([math.nan], {}, "args must be JSON-serializable: Out of range float values are not JSON compliant"),
        ([], {"a": math.inf}, "kwargs must be JSON-serializable: Out of range float values are not JSON"),
        ([b"bytes"], {}, "args must be JSON-serializable: Object of type bytes is not JSON serializable"),
        ([timezone.now()], {}, "args must be JSON-serializable: Object of type datetime is not JSON"),
        ([{1: "a"}], {}, "args must be JSON: the key 1 at args[0] is not a string"),
        (_circular(), {}, "args must be JSON-serializable: nested too deeply, or circular"),
        ([_nested(100_000)], {}, "args must be JSON-serializable: nested too deeply, or circular"),
        (
            [],
            {"a": {"b": {None: 1}}},
            "kwargs must be JSON: the key None at kwargs['a']['b'] is not a string",
        ),
        (["a\x00b"], {}, "args must be JSON that PostgreSQL can store: NUL character in args[0]"),
        (
            [],
            {"k": ["ok", {"x\x00": [1]}]},
            "kwargs must be JSON that PostgreSQL can store: NUL character in a key at kwargs['k'][1]",
        ),
        (["ok", "caf\udce9"], {}, "args must be JSON that PostgreSQL can store: lone surrogate in args[1]"),
        (
            [],
            {"caf\udce9": 1},
            "kwargs must be JSON that PostgreSQL can store: lone surrogate in a key at kwargs",
        ),
    ],
)
def test_arguments_that_are_not_json_are_refused(args: list, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidPayload) as info:
        basic.add.enqueue(*args, **kwargs)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, InvalidTask)
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_text_that_only_looks_like_an_escaped_nul_or_surrogate_is_accepted() -> None:
    args = ["\\u0000 is a backslash and five letters, \\udce9 too", {"\\u0000": "\\\\u0000 😀"}]
    result = basic.add.enqueue(*args)
    assert Job.objects.get(id=result.id).args == args


@pytest.mark.django_db
@override_settings(JOBS={"MAX_PAYLOAD_BYTES": 100})
def test_a_payload_over_the_size_limit_is_refused() -> None:
    # '["xx..."]' and '{}': 4 + 2 bytes of JSON around the string.
    basic.record.enqueue("x" * 94)
    with pytest.raises(InvalidPayload) as info:
        basic.record.enqueue("x" * 95)
    assert str(info.value) == (
        "payload of tests.tasks.basic.record is 101 bytes; the limit is 100 "
        "(JOBS_MAX_PAYLOAD_BYTES). Pass ids, not data."
    )
    assert Job.objects.count() == 1


LEASE_RANGE = (
    "lease_seconds must be between 1 and 43200 (extended every third of it, a lease must leave "
    "room for a stalled extension to be noticed and retried)."
)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"queue_name": "nope"},
            "Queue 'nope' is not valid for backend. Configured queues: default, email, low, push.",
        ),
        ({"priority": 101}, "priority must be a whole number between -100 and 100."),
        ({"priority": -101}, "priority must be a whole number between -100 and 100."),
        ({"priority": 1.5}, "priority must be a whole number between -100 and 100."),
        ({"run_after": datetime(2030, 1, 1)}, "run_after must be an aware datetime."),  # noqa: DTZ001
        ({"max_attempts": 0}, "max_attempts must be a whole number of at least 1."),
        ({"max_attempts": 2.5}, "max_attempts must be a whole number of at least 1."),
        ({"timeout": -1}, "timeout must be a positive number of seconds."),
        ({"timeout": 0}, "timeout must be a positive number of seconds."),
        ({"soft_timeout": -1}, "soft_timeout must be a positive number of seconds."),
        ({"backoff_base": 0}, "backoff_base must be a positive number of seconds."),
        ({"backoff_cap": "10"}, "backoff_cap must be a positive number of seconds."),
        ({"dedupe_window": 60}, "dedupe_window needs a dedupe_key."),
        ({"dedupe_key": "k", "dedupe_window": -1}, "dedupe_window must be a positive number of seconds."),
        ({"lease_seconds": 0}, LEASE_RANGE),
        # Shorter than its heartbeats (every third of it) can be kept when one stalls.
        ({"lease_seconds": 0.5}, LEASE_RANGE),
        ({"lease_seconds": 86400}, LEASE_RANGE),
        ({"timeout": 5, "soft_timeout": 5}, "soft_timeout must be shorter than timeout."),
    ],
)
def test_invalid_options_are_refused_before_anything_is_written(options: dict, message: str) -> None:
    with pytest.raises(InvalidTask) as info:
        basic.add.using(**options).enqueue(1, 2)
    assert str(info.value) == message
    assert Job.objects.count() == 0


def test_invalid_options_on_the_decorator_are_refused() -> None:
    with pytest.raises(InvalidTask, match="max_attempts must be a whole number of at least 1"):
        task(max_attempts=0)(engine.record_key)
    with pytest.raises(InvalidTask, match="dedupe_window needs a dedupe_key"):
        task(dedupe_window=10)(engine.record_key)


# --- async ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_aenqueue_inserts_a_job() -> None:
    result = async_to_sync(basic.add.aenqueue)(2, 3)
    assert result.status == TaskResultStatus.READY
    assert count_elsewhere(result.id) == 1
    fetched = async_to_sync(basic.add.aget_result)(result.id)
    assert (fetched.id, fetched.args) == (result.id, [2, 3])


# --- owner, public, not-started deadline ----------------------------------------------


@pytest.mark.django_db
def test_owner_is_stored_as_a_key(django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("kim", "kim@example.com", "pw-kim-1234")
    by_instance = basic.record.using(owner=user, public=True).enqueue(1)
    by_string = basic.record.using(owner="tenant:7").enqueue(2)
    rows = {str(j.id): j for j in Job.objects.all()}
    assert rows[by_instance.id].owner == f"auth.user:{user.pk}" and rows[by_instance.id].public
    assert rows[by_string.id].owner == "tenant:7" and not rows[by_string.id].public
    bulk = basic.record.using(owner=user).enqueue_many([((n,), {}) for n in range(60)])
    assert Job.objects.filter(id__in=[r.id for r in bulk], owner=f"auth.user:{user.pk}").count() == 60


@pytest.mark.django_db
@pytest.mark.parametrize(
    "options, message",
    [
        ({"owner": 42}, "owner is a saved model instance or a string"),
        ({"owner": ""}, "owner must be"),
        ({"owner": "x" * 201}, "owner must be"),
        ({"public": "yes"}, "public must be True or False"),
        ({"expires_at": "tomorrow"}, "expires_at must be a datetime"),
        ({"expires_at": datetime(2030, 1, 1)}, "expires_at must be an aware datetime"),  # noqa: DTZ001
    ],
)
def test_bad_owner_public_or_deadline_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidTask, match=message):
        basic.record.using(**options).enqueue(1)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_job_claimed_after_its_deadline_expires_without_running(side_effects: None) -> None:
    now = timezone.now()
    late = basic.record.using(expires_at=now + timedelta(seconds=1)).enqueue("late")
    on_time = basic.record.using(expires_at=now + timedelta(hours=1)).enqueue("on-time")
    factories.run_due(now=now + timedelta(seconds=2))
    expired, ran = Job.objects.get(id=late.id), Job.objects.get(id=on_time.id)
    assert expired.state == State.EXPIRED and expired.attempt == 0 and expired.finished_at
    assert expired.worker_ids == [] and expired.errors == []
    assert ran.state == State.SUCCEEDED
    store.replay(late.id)
    replayed = Job.objects.get(id=late.id)
    assert replayed.state == State.QUEUED and replayed.expires_at is None


# --- dedupe keys and trace ids are checked at enqueue ------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dedupe_key": 12345}, "dedupe_key must be a non-empty string"),
        ({"dedupe_key": ""}, "dedupe_key must be a non-empty string"),
        ({"dedupe_key": "x" * 501}, "at most 500 characters"),
        ({"dedupe_key": "a\x00b"}, "without NUL"),
        ({"trace_id": "a\x00b"}, "trace_id must be a non-empty string"),
        ({"trace_id": 42}, "trace_id must be a non-empty string"),
        ({"trace_id": "t" * 201}, "at most 200 characters"),
        ({"jitter": "no"}, "jitter must be True or False"),
        ({"non_retryable": (42,)}, "non_retryable entries are exception classes or dotted paths"),
        ({"non_retryable": ("no.such.Error",)}, "cannot be imported"),
    ],
)
def test_bad_keys_ids_and_options_fail_at_enqueue_and_leave_nothing(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTask, match=message):
        basic.record.using(**options).enqueue("x")
    with pytest.raises(InvalidTask, match=message):
        basic.record.using(**options).enqueue_many([(("x",), {})] * 3)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_key_of_500_characters_works_twice() -> None:
    keyed = basic.record.using(dedupe_key="k" * 500)
    first, second = keyed.enqueue("a"), keyed.enqueue("b")
    assert (second.id, second.deduplicated) == (first.id, True)


# --- wake-ups: outside a transaction, only when a queue had nothing due -------------------


def _notifications(listener: psycopg.Connection) -> list[str]:
    listener.execute("SELECT 1")
    return [n.payload for n in listener.notifies(timeout=0.2)]


@pytest.mark.django_db(transaction=True)
def test_a_job_alone_wakes_workers_only_when_its_queue_gets_its_first_due_job() -> None:
    with connect(application_name="test-listener") as listener:
        listener.execute("LISTEN jobs_queued")
        basic.add.enqueue(1, 2)
        assert _notifications(listener) == ["default"]
        # Due jobs wait already: whoever takes them claims again, no wake-up needed.
        basic.add.enqueue(3, 4)
        basic.add.using(dedupe_key="k").enqueue(5, 6)
        assert _notifications(listener) == []
        # Another queue, empty: woken; a delayed job: not due, no wake-up (the promoter
        # wakes the workers when it comes due).
        basic.add.using(queue_name="email").enqueue(1, 1)
        basic.add.using(queue_name="low", run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
        assert _notifications(listener) == ["email"]


@pytest.mark.django_db(transaction=True)
def test_a_transaction_or_a_batch_wakes_workers_at_its_commit_whatever_was_due_before() -> None:
    # The due job seen at the INSERT may be claimed and done by the commit, its workers
    # asleep until their next poll: a wake-up skipped there would leave the new job waiting.
    basic.add.enqueue(1, 2)
    with connect(application_name="test-listener") as listener:
        listener.execute("LISTEN jobs_queued")
        with transaction.atomic():
            basic.add.enqueue(3, 4)
            basic.add.using(dedupe_key="k").enqueue(5, 6)
            basic.add.using(queue_name="email").enqueue(1, 1)
            assert _notifications(listener) == []  # (sent at the commit)
        # One per queue and transaction.
        assert sorted(_notifications(listener)) == ["default", "email"]
        basic.add.enqueue_many([((n, n), {}) for n in range(60)])
        basic.add.enqueue_many([((n, n), {}) for n in range(3)])
        assert _notifications(listener) == ["default", "default"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: basic.add.enqueue(1, 2, 3), "too many positional arguments"),
        (lambda: basic.add.enqueue(1, 2, c=3), "unexpected keyword argument 'c'"),
        (lambda: basic.add.enqueue(1), "missing a required argument: 'b'"),
        (
            lambda: basic.record.enqueue(("a", "tuple")),
            "is a tuple, which the handler would get back as a list",
        ),
        (lambda: basic.add.enqueue_many([((1, 2), {}), ((1, 2, 3), {})]), "too many positional arguments"),
    ],
)
def test_arguments_that_do_not_fit_the_task_fail_at_enqueue(call: Any, message: str) -> None:
    with pytest.raises(InvalidPayload, match=message):
        call()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_an_unknown_queue_names_the_configured_ones() -> None:
    with pytest.raises(
        InvalidTask,
        match=r"Queue 'emial' is not valid for backend\. Configured queues: default, email, low, push\.",
    ):
        basic.add.using(queue_name="emial")


class Level(enum.IntEnum):
    HIGH = 2


@pytest.mark.django_db
def test_a_results_arguments_are_what_the_handler_will_get() -> None:
    # Flat ones are copied (a tuple as a list), others decoded from what was stored: an int
    # enum comes back a plain int, a nested structure equal and not shared.
    nested = {"ids": [1, 2], "flag": True}
    results = basic.echo.enqueue_many(
        [((1,), {"name": "a", "none": None, "x": 2.5}), ((nested,), {"level": Level.HIGH})]
    )
    flat, deep = results
    assert (flat.args, type(flat.args)) == ([1], list)
    assert flat.kwargs == {"name": "a", "none": None, "x": 2.5}
    assert deep.args == [nested] and deep.args[0] is not nested
    assert deep.kwargs == {"level": 2} and type(deep.kwargs["level"]) is int
    stored = {job.id: (job.args, job.kwargs) for job in Job.objects.all()}
    for result in results:
        assert stored[uuid.UUID(result.id)] == (result.args, result.kwargs)


def _prepared_inserts() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%INSERT INTO jobs_job%%'"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("prepared", "statements"), [(True, 1), (False, 0)], ids=["prepared", "not-prepared"]
)
def test_the_enqueue_statement_is_prepared_once_per_connection_unless_turned_off(
    prepared: bool, statements: int
) -> None:
    # Django's own connection has psycopg's prepared statements off; the enqueue turns them
    # on for its statement (one plan per connection, not one per job), except with
    # JOBS_PREPARED_STATEMENTS=false (a pooler that cannot keep them, PgBouncer < 1.21).
    with override_settings(JOBS={"PREPARED_STATEMENTS": prepared}):
        connection.close()
        for i in range(10):
            basic.add.enqueue(i, i)
        assert _prepared_inserts() == statements
    assert Job.objects.count() == 10
