"""A streaming replica serves the console's read views (jobs/routers.py, jobs/replica.py)
while writes and claims stay on the primary; a promoted replica takes the workers over."""

from __future__ import annotations

import json
import subprocess

import pytest

from jobs import replica
from jobs.models import Job
from jobs.routers import ReplicaRouter
from tests.conftest import manage
from tests.replica.conftest import Replication

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
    assert router.db_for_write(Job) == "default"
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
