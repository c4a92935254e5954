"""The job table's storage: its pages leave room for a row's next version
(jobs/migrations/0018_job_fillfactor.py, docs/explanation/hot-path.md)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from jobs import store
from tests.support import factories

pytestmark = pytest.mark.django_db


def blocks() -> dict[uuid.UUID, int]:
    """The page each job row's current version is on."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, (ctid::text::point)[0]::int FROM jobs_job")
        return dict(cursor.fetchall())


def test_the_table_is_filled_to_seventy_percent() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'jobs_job'::regclass")
        assert cursor.fetchone()[0] == ["fillfactor=70"]


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
