"""A private primary (initdb on its own port, wal_level=replica, migrated) and its streaming
replica (pg_basebackup -R), for the tier; the machine's own cluster is never touched."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT, subprocess_env
from tests.support.servers import Cluster, private_dir

DBNAME = "jobqueue_replica_tier"
SIDE_EFFECTS = (
    "CREATE TABLE test_side_effects"
    " (id bigserial PRIMARY KEY, key text NOT NULL, at timestamptz DEFAULT now())"
)


@dataclass
class Replication:
    primary: Cluster
    replica: Cluster

    def env(self, **extra: str) -> dict[str, str]:
        """A manage.py subprocess on the primary, reading the console's views from the replica."""
        return subprocess_env(
            DATABASE_URL=self.primary.url(DBNAME), DATABASE_REPLICA_URL=self.replica.url(DBNAME), **extra
        )

    def caught_up(self) -> bool:
        (lsn,) = self.primary.execute("SELECT pg_current_wal_lsn()")[0]
        (replayed,) = self.replica.execute(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")[0]
        return bool(replayed)

    def wait_caught_up(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.caught_up():
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def replication() -> Iterator[Replication]:
    base = private_dir("jobs-replica-")
    primary = Cluster.primary(base)
    replica: Cluster | None = None
    try:
        primary.start()
        primary.execute(f"CREATE DATABASE {DBNAME}")
        primary.execute(SIDE_EFFECTS, DBNAME)
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"],
            cwd=ROOT,
            env=subprocess_env(DATABASE_URL=primary.url(DBNAME)),
            check=True,
        )
        replica = primary.replica(base)
        replica.start()
        # Synchronous from now on (the replica's copy of the configuration does not have it,
        # so once promoted it does not wait for a standby of its own): a commit the primary
        # acknowledged is on the replica, and a failover loses none.
        primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.execute("SELECT pg_reload_conf()")
        replication = Replication(primary, replica)
        replication.wait_caught_up()
        yield replication
    finally:
        for cluster in (replica, primary):
            if cluster is not None:
                with contextlib.suppress(RuntimeError):
                    cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)
