"""The job table's storage: its pages leave room for a row's next version
(jobs/migrations/0018_job_fillfactor.py), the columns its transitions change come last
(0021_job_column_order.py), and that migration moves a populated table in place
(docs/explanation/hot-path.md)."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import InternalError, connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from jobs import store
from jobs.states import State
from tests.support import factories

COLUMN_ORDER = importlib.import_module("jobs.migrations.0021_job_column_order")

pytestmark = pytest.mark.django_db


def blocks() -> dict[uuid.UUID, int]:
    """The page each job row's current version is on."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, (ctid::text::point)[0]::int FROM jobs_job")
        return dict(cursor.fetchall())


def layout() -> dict[str, Any]:
    """The job table as PostgreSQL describes it: its columns in order, its options, and the
    definitions of its constraints, indexes and triggers."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
                    WHERE attrelid = 'jobs_job'::regclass AND attnum > 0 AND NOT attisdropped),
                   (SELECT reloptions FROM pg_class WHERE oid = 'jobs_job'::regclass),
                   (SELECT array_agg(conname || ' ' || pg_get_constraintdef(oid) ORDER BY conname)
                    FROM pg_constraint WHERE conrelid = 'jobs_job'::regclass),
                   (SELECT array_agg(pg_get_indexdef(indexrelid) ORDER BY indexrelid::regclass::text)
                    FROM pg_index WHERE indrelid = 'jobs_job'::regclass),
                   (SELECT array_agg(pg_get_triggerdef(oid) ORDER BY tgname)
                    FROM pg_trigger WHERE tgrelid = 'jobs_job'::regclass AND NOT tgisinternal)
            """
        )
        columns, options, constraints, indexes, triggers = cursor.fetchone()
    return {"columns": columns, "options": options, "constraints": constraints, "indexes": indexes,
            "triggers": triggers}  # fmt: skip


def contents() -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """Every row (as JSON, by column name) and the queue counts the triggers keep."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, to_jsonb(j) FROM jobs_job j")
        rows = dict(cursor.fetchall())
        cursor.execute(
            "SELECT queue_name || ' ' || bucket, sum(delta) FROM jobs_queue_count GROUP BY 1 ORDER BY 1"
        )
        return rows, cursor.fetchall()


def test_the_columns_transitions_change_come_last_and_pages_are_half_filled() -> None:
    described = layout()
    assert tuple(described["columns"]) == COLUMN_ORDER.ORDER
    assert described["options"] == ["fillfactor=50"]


def test_a_claimed_row_keeps_its_page_where_the_page_has_room() -> None:
    # Pages of inserted rows, the first of them filled (at 100% it would hold no new
    # version): the claim's new versions of its rows stay on it as far as its room goes,
    # so they are logged as changes on one page rather than as whole tuples moved away.
    # A fresh file for the table (rolled back with the test): rows that earlier tests
    # rolled back would leave room on its first pages.
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job")
    factories.insert_queued(300)
    before = blocks()
    first_page = {job_id for job_id, block in before.items() if block == 0}
    assert len(first_page) >= 15
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=300)
    assert len(claimed) == 300
    after = blocks()
    stayed = {job_id for job_id in first_page if after[job_id] == 0}
    assert len(stayed) >= 5, (len(first_page), len(stayed))


@pytest.mark.django_db(transaction=True)
def test_the_column_order_migration_moves_a_populated_table_in_place() -> None:
    label = apps.get_app_config("jobs").label
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes(label)
    before_it = [(label, "0020_lease_index_by_holder")]
    MigrationExecutor(connection).migrate(before_it)
    try:
        assert tuple(layout()["columns"]) == COLUMN_ORDER.PREVIOUS_ORDER
        # Rows in every state a live system holds: waiting, scheduled, queued, running (two
        # claimed by a worker, one of them started), finished, dead with errors, and a job
        # with a dedupe key, an owner and progress.
        now = timezone.now()
        factories.insert_queued(6)
        factories.insert_finished(4)
        factories.job(State.WAITING)
        factories.job(State.SCHEDULED, run_at=now + timedelta(hours=1))
        factories.job(State.DEAD, attempt=3)
        factories.job(State.CANCELLED, cancel_requested_at=now)
        factories.job(dedupe_key="report:7", owner="user:7", progress={"done": 1, "total": 3})
        worker = uuid.uuid4()
        with connection.cursor() as cursor:
            claimed = store.claim(cursor, worker=worker, queues=["default"], limit=2)
            store.record_outcomes(cursor, worker=worker, outcomes=[], started=[(claimed[0].id, 1)])
        assert len(claimed) == 2
        rows, counts = contents()
        described = layout()

        MigrationExecutor(connection).migrate(latest)

        moved = layout()
        assert tuple(moved["columns"]) == COLUMN_ORDER.ORDER
        assert moved["options"] == ["fillfactor=50"]
        for part in ("constraints", "indexes", "triggers"):
            assert moved[part] == described[part], part
        assert contents() == (rows, counts)
        # The engine goes on with the moved rows: the running jobs' outcomes are recorded
        # (fenced by state, holder and attempt), and a queued one is claimed.
        outcomes = [{"id": job.id, "attempt": 1, "state": "succeeded", "result": None} for job in claimed]
        with connection.cursor() as cursor:
            recorded = store.record_outcomes(cursor, worker=worker, outcomes=outcomes)
            assert set(recorded.values()) == {"succeeded"}
            assert len(store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=1)) == 1
    finally:
        MigrationExecutor(connection).migrate(latest)


@pytest.mark.django_db(transaction=True)
def test_a_view_on_the_job_table_stops_the_column_order_migration_and_changes_nothing() -> None:
    # docs/how-to/deployment.md: drop it, migrate, and make it again.
    label = apps.get_app_config("jobs").label
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes(label)
    MigrationExecutor(connection).migrate([(label, "0020_lease_index_by_holder")])
    try:
        factories.insert_queued(3)
        rows, counts = contents()
        with connection.cursor() as cursor:
            cursor.execute("CREATE VIEW my_jobs AS SELECT id, state FROM jobs_job")
        with pytest.raises(InternalError, match="other objects depend on it"):
            MigrationExecutor(connection).migrate(latest)
        assert tuple(layout()["columns"]) == COLUMN_ORDER.PREVIOUS_ORDER
        assert contents() == (rows, counts)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP VIEW IF EXISTS my_jobs")
        MigrationExecutor(connection).migrate(latest)
    assert tuple(layout()["columns"]) == COLUMN_ORDER.ORDER
