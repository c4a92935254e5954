"""A streaming replica serves the console's read views (jobs/routers.py, jobs/console/replica.py)
while writes and claims stay on the primary; a promoted replica takes the workers over."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from jobs.console import replica
from jobs.models import Job
from jobs.routers import ReplicaRouter
from tests.conftest import manage, subprocess_env
from tests.replica.conftest import DBNAME, Replication
from tests.support.workers import running_worker, wait_until

pytestmark = pytest.mark.replica


def django_shell(code: str, env: dict[str, str]) -> str:
    proc = manage(
        "shell", "--no-imports", "-c", code, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out


def test_without_a_replica_everything_reads_the_primary() -> None:
    router = ReplicaRouter()
    with replica.using_replica():
        assert router.db_for_read(Job) is None
    assert replica.lag_seconds() is None
    assert router.db_for_write(Job) is None
    from_replica = Job()
    from_replica._state.db = "replica"
    assert router.db_for_write(Job, instance=from_replica) == "default"
    assert router.allow_migrate("replica", "jobs") is False


def test_the_console_reads_from_the_replica_and_writes_to_the_primary(replication: Replication) -> None:
    out = django_shell(
        "from tests.replica.console_reads import main; main()", replication.env(ALLOWED_HOSTS="testserver")
    )
    seen = json.loads(out.strip().splitlines()[-1])
    paused, resumed = seen["paused"], seen["resumed"]
    # Replay paused: the job is on the primary only, and the replica-backed views do not
    # show it yet, while the lag they report grows.
    assert paused["on_primary"] and not paused["on_replica"]
    assert paused["status_api"] == 404
    assert not paused["in_job_list"]
    assert paused["lag"] is not None and paused["lag"] > 0
    assert paused["index_shows_lag"]
    # Replay resumed: the same views show it.
    assert resumed["on_replica"] and resumed["status_api"] == 200 and resumed["in_job_list"]
    assert resumed["lag"] is not None


def test_workers_follow_a_promoted_replica_and_no_committed_job_is_lost(
    replication: Replication, tmp_path: Path
) -> None:
    primary, standby = replication.primary, replication.replica
    # Both servers, the writable one wins: the replica once promoted.
    both = (
        f"postgres://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{DBNAME}"
        "?target_session_attrs=read-write"
    )
    stop_file = tmp_path / "stop"
    committed_log = tmp_path / "committed.txt"

    def committed() -> dict[str, str]:
        lines = committed_log.read_text().splitlines()
        return dict(line.split() for line in lines if line.count(" ") == 1)

    def succeeded(ids: list[str]) -> int:
        with psycopg.connect(standby.url(DBNAME), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM jobs_job WHERE id = ANY(%s::uuid[]) AND state = 'succeeded'", [ids]
            ).fetchone()
            return int(row[0]) if row else 0

    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(
                running_worker(
                    tmp_path,
                    "--concurrency",
                    "2",
                    name=f"worker-{i}",
                    DATABASE_URL=both,
                    JOBS_LEASE_SECONDS="2",
                )
            )
            for i in range(2)
        ]
        with committed_log.open("w") as out:
            producer = manage(
                "shell",
                "--no-imports",
                "-c",
                f"from tests.replica.producer import main; main({str(stop_file)!r})",
                env=subprocess_env(DATABASE_URL=both),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        stack.callback(producer.kill)
        wait_until(lambda: len(committed()) >= 40, timeout=30, message="jobs before the failover")
        wait_until(lambda: succeeded(list(committed())) >= 20, timeout=30, message="jobs done before")

        primary.stop("immediate")
        standby.promote()
        at_failover = len(committed())
        # Producer and workers find the new primary by themselves.
        wait_until(lambda: len(committed()) >= at_failover + 40, timeout=30, message="enqueues after")
        stop_file.touch()
        assert producer.wait(timeout=15) == 0
        jobs = committed()
        wait_until(lambda: succeeded(list(jobs)) == len(jobs), timeout=40, message="every committed job done")
        reconnected = [w for w in workers if "event=db_reconnected" in w.log()]
        assert reconnected, "the workers reconnected to the promoted replica"

    with psycopg.connect(standby.url(DBNAME), autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        done = dict(conn.execute("SELECT key, count(*) FROM test_side_effects GROUP BY key").fetchall())
    # At least once each (a job claimed on the old primary may run again on the new one).
    assert all(done.get(key, 0) >= 1 for key in jobs.values())
