"""The worker's own connection (jobs/db.py) when PostgreSQL refuses a statement with
a deadlock or a serialization failure: nothing is wrong with the connection, so the
statement runs again on it, and a caller that does not retry gets the error with the
connection kept."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from jobs.db import Connection

pytestmark = pytest.mark.django_db(transaction=True)


def refused_first(times: int, code: str = "40P01") -> Any:
    """An operation PostgreSQL refuses ``times`` times with ``code``, then runs."""
    calls = {"n": 0}

    def operation(cursor: psycopg.Cursor[Any]) -> int:
        calls["n"] += 1
        if calls["n"] <= times:
            cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'refused (test)' USING ERRCODE = '{code}'; END $$")
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
        assert row is not None
        return int(row[0])

    return operation


def test_a_statement_refused_by_a_deadlock_runs_again_on_the_same_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = Connection("default", name="test-conflicts")
    try:
        backend = db.ensure().connection.info.backend_pid
        with caplog.at_level(logging.WARNING, logger="jobs"):
            assert db.run(refused_first(2, "40001")) == backend
        assert db.conflicts == 0
    finally:
        db.drop()
    assert caplog.text.count("event=db_conflict conn=test-conflicts sqlstate=40001") == 2
    assert "db_connection_lost" not in caplog.text


def test_without_retry_the_refusal_reaches_the_caller_and_the_connection_stays() -> None:
    db = Connection("default", name="test-conflicts")
    try:
        backend = db.ensure().connection.info.backend_pid
        with pytest.raises(psycopg.errors.DeadlockDetected):
            db.run(refused_first(1), retry=False)
        assert db.conn is not None and db.ensure().connection.info.backend_pid == backend
    finally:
        db.drop()
