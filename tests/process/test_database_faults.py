"""A worker behind a database that hangs: hard time limits and child supervision go on
without it, and nothing the worker does leaves session state behind on a server connection
(a pooler in transaction mode hands those to other clients). Through a real TCP proxy that
can stop forwarding (issue 7, points 9 and 14)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from jobs.states import State
from tests.process.pgproxy import PgProxy
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import basic, hostile

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


@pytest.fixture
def proxy() -> Iterator[PgProxy]:
    settings = connection.settings_dict
    proxy = PgProxy((settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)))
    yield proxy
    proxy.close()


def through(proxy: PgProxy) -> dict[str, str]:
    settings = connection.settings_dict
    user, name = settings["USER"] or "postgres", settings["NAME"]
    return {"DATABASE_URL": f"postgres://{user}@127.0.0.1:{proxy.port}/{name}?sslmode=disable"}


def test_a_hard_time_limit_is_enforced_while_the_database_hangs(tmp_path: Path, proxy: PgProxy) -> None:
    with running_worker(tmp_path, "--concurrency", "1", **through(proxy)) as worker:
        spinner = hostile.spin_with_a_limit.enqueue("spin").id
        wait_until(lambda: job(spinner).state == State.RUNNING, timeout=20)
        [executor] = worker.executor_pids()
        started = time.monotonic()
        proxy.freeze()
        # The limit is 3 s: the executor is killed about then, whatever the database does.
        wait_until(lambda: executor not in worker.executor_pids(), timeout=6, message="the time-limit kill")
        assert time.monotonic() - started < 6
        assert "event=time_limit" in worker.log()
        proxy.thaw()
        # Once the database answers again, the kill is recorded and work goes on.
        wait_until(lambda: job(spinner).errors, timeout=30, message="the timeout recorded")
        after = basic.record.enqueue("after").id
        wait_until(lambda: job(after).state == State.SUCCEEDED, timeout=30)
    assert job(spinner).errors[0]["exception"] == "jobs.exceptions.TimeLimitExceeded"


def test_the_worker_leaves_no_session_state_on_server_connections(tmp_path: Path, proxy: PgProxy) -> None:
    with running_worker(tmp_path, "--concurrency", "2", JOBS_LEASE_SECONDS="3", **through(proxy)):
        ids = [r.id for r in basic.record.enqueue_many([((f"k{n}",), {}) for n in range(50)])]
        slow = hostile.sleep_and_record.enqueue("slow", 2.5).id
        wait_until(lambda: all(job(i).state == State.SUCCEEDED for i in [*ids, slow]), timeout=30)
    sent = proxy.sent_by("jobs-")
    assert any("FOR UPDATE SKIP LOCKED" in sql for sql in sent), "the worker's statements went through"
    session_state = [
        sql
        for sql in sent
        if sql.lstrip().upper().startswith(("SET ", "RESET ", "PREPARE ", "DISCARD "))
        and not sql.lstrip().upper().startswith("SET LOCAL ")
    ]
    assert session_state == []
