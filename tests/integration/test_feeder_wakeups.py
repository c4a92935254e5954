"""An executor's feeder hears the NOTIFYs of new jobs on its own connection: read with a
statement's answer or while it waits, for the worker's queues only, and heard again once a
lost connection has been made again by the wait itself (a NOTIFY then has no listener)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from jobs import store
from jobs.worker.db import Connection, connect, executors_listen
from jobs.worker.feeder import Feeder, Lane
from tests import factories
from tests.process.resilience_support import terminate_worker_connections

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def feeder() -> Iterator[Feeder]:
    db = Connection("default", name="test-feeder-wakeups")
    lane = Lane("inline", entries=[0])
    config = factories.worker_config("default", "email")
    fed = Feeder(config, token=uuid.uuid4(), db=db, lanes={"inline": lane})
    db.on_connect = fed.listen
    db.ensure()
    try:
        yield fed
    finally:
        db.drop()
        fed.close()


def notify(queue: str) -> None:
    with connect(application_name="test-notifier") as conn:
        conn.execute("SELECT pg_notify(%s, %s)", [store.NOTIFY_CHANNEL, queue])


def wait_briefly(fed: Feeder) -> float:
    """Seconds one wait of an idle feeder took (its poll interval is far longer)."""
    fed.idle_until = time.monotonic() + 60
    started = time.monotonic()
    fed._wait(started)
    return time.monotonic() - started


def test_a_worker_listens_on_its_executors_connections_unless_listen_goes_elsewhere(
    settings: object,
) -> None:
    assert executors_listen(True) is True
    assert executors_listen(False) is False
    settings.JOBS = {**settings.JOBS, "LISTEN_URL": "postgres://elsewhere/db"}  # type: ignore[attr-defined]
    assert executors_listen(True) is False


def test_a_new_connection_claims_at_once_then_waits_for_a_notify(feeder: Feeder) -> None:
    # NOTIFYs may have gone by while it was not listening: the first wait does not sleep.
    assert feeder.announced is True
    assert wait_briefly(feeder) < 0.5 and feeder.idle_until == 0.0
    # The next one sleeps until a job of one of its queues is announced.
    notify("email")
    assert wait_briefly(feeder) < 0.5
    assert feeder.idle_until == 0.0 and feeder.announced is False


def test_a_notify_read_with_a_statements_answer_is_not_lost(feeder: Feeder) -> None:
    wait_briefly(feeder)
    notify("default")
    # psycopg reads it with this statement's answer, before the feeder waits again.
    time.sleep(0.05)
    feeder.db.run(lambda cursor: cursor.execute("SELECT 1"))
    assert feeder.announced is True
    assert wait_briefly(feeder) < 0.1


def test_a_notify_for_another_queue_does_not_wake_it(feeder: Feeder) -> None:
    wait_briefly(feeder)
    notify("low")
    time.sleep(0.05)
    feeder.db.run(lambda cursor: cursor.execute("SELECT 1"))
    assert feeder.announced is False


def test_a_lost_connection_is_made_again_by_the_wait_and_listens_again(feeder: Feeder) -> None:
    wait_briefly(feeder)
    before = feeder.db.conn
    assert terminate_worker_connections("test-feeder-wakeups") == 1
    # The waits see the connection end (the server's last word, then its close), not only
    # the next statement, and make it again; that one claims at once: it missed what went by.
    for _ in range(3):
        assert wait_briefly(feeder) < 1.0
        if feeder.db.conn not in (None, before):
            break
    assert feeder.db.conn not in (None, before)
    assert feeder.idle_until == 0.0
    notify("default")
    assert wait_briefly(feeder) < 0.5 and feeder.idle_until == 0.0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'test-feeder-wakeups'")
        assert cursor.fetchone()[0] == 1


def test_while_the_database_is_away_it_tries_again_at_most_every_second(feeder: Feeder) -> None:
    wait_briefly(feeder)
    feeder.db.lost(psycopg.OperationalError("gone"))
    feeder.db.libpq = {"port": 1, "connect_timeout": 1}
    started = time.monotonic()
    elapsed = wait_briefly(feeder)
    assert feeder.db.conn is None
    assert 0.5 < elapsed < 2.0 and feeder.reconnect_at > started
