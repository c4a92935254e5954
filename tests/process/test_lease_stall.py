"""A housekeeper whose database session freezes is replaced well within one lease, so a
job longer than its lease is never run twice at once (invariant 7); and a lease too short
for that is refused at start."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from jobs.states import State
from tests.conftest import manage, subprocess_env
from tests.process.pgproxy import PgProxy
from tests.support.workers import job, running_worker, wait_until
from tests.tasks import hostile

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


@pytest.fixture
def proxy() -> Iterator[PgProxy]:
    settings = connection.settings_dict
    proxy = PgProxy((settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)))
    yield proxy
    proxy.close()
    # The frozen session's server backend ends once its socket is closed: let it go before
    # the test database is dropped.
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not _other_sessions(), timeout=10)


def _other_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def through(proxy: PgProxy) -> dict[str, str]:
    settings = connection.settings_dict
    user, name = settings["USER"] or "postgres", settings["NAME"]
    return {"DATABASE_URL": f"postgres://{user}@127.0.0.1:{proxy.port}/{name}?sslmode=disable"}


def runs_of(key: str) -> list[tuple[datetime, datetime | None]]:
    """Each run of the handler as (start, end), from the marks it wrote itself; end is None
    for a run that never finished."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key, at FROM test_side_effects WHERE key IN (%s, %s) ORDER BY at, id",
            [f"{key}:start", f"{key}:end"],
        )
        marks = cursor.fetchall()
    runs: list[tuple[datetime, datetime | None]] = []
    open_starts: list[datetime] = []
    for mark, at in marks:
        if mark.endswith(":start"):
            open_starts.append(at)
        else:
            runs.append((open_starts.pop(0), at))
    return sorted(runs + [(start, None) for start in open_starts], key=lambda run: run[0])


def test_a_frozen_housekeeper_session_never_lets_a_long_job_run_twice_at_once(
    tmp_path: Path, proxy: PgProxy
) -> None:
    lease = {"JOBS_LEASE_SECONDS": "3"}
    with running_worker(tmp_path, "--concurrency", "2", name="frozen", **lease, **through(proxy)) as frozen:
        long = hostile.sleep_and_record.enqueue("long", 9.0).id
        wait_until(lambda: runs_of("long"), timeout=20, message="the long job's start")
        # A rival on a healthy connection reaps whatever lease lapses and runs it.
        with running_worker(tmp_path, "--concurrency", "1", name="rival", **lease):
            wait_until(lambda: job(long).attempt == 1 and frozen.housekeeper_pid(), timeout=10)
            # The heartbeat's session stops answering; a new connection would be fine.
            assert proxy.freeze_sessions("jobs-housekeeper") == 1
            wait_until(lambda: job(long).state == State.SUCCEEDED, timeout=60, message="the long job")
        log = frozen.log()
    runs = runs_of("long")
    for (_, earlier_end), (later_start, _) in itertools.pairwise(runs):
        assert earlier_end is not None and earlier_end <= later_start, runs
    assert len(runs) == 1, runs
    assert "event=housekeeper_stalled" in log


def test_a_lease_too_short_for_its_heartbeats_is_refused_with_a_clear_error() -> None:
    env = subprocess_env(JOBS_LEASE_SECONDS="0.5")
    proc = manage("runworker", "--burst", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0, output
    assert "JOBS_LEASE_SECONDS" in output and "at least 1" in output, output
    assert "worker_started" not in output
