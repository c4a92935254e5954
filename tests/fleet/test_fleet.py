"""The many-hosts drill, short: two simulated hosts (each a runworker in its own process
group with its own host name), one of them SIGKILLed as a whole part-way; every job's side
effect is there exactly once, and only jobs in flight on the killed host ran again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import manage, side_effect_counts, subprocess_env
from tests.support.workers import WorkerProcess, children_of, running_worker, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.django_db(transaction=True)]


def test_two_hosts_one_killed_keep_every_side_effect_once() -> None:
    proc = manage(
        "fleet", "--hosts", "2", "--executors", "1", "--jobs", "300", "--millis", "10", "--kill", "--force",
        env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    (result,) = json.loads(out[: out.index("\n]") + 2])
    assert result["hosts"] == 2 and result["kills"] == 1
    assert result["succeeded"] == result["jobs"] == result["effect_rows"] == 300
    assert result["lost"] == 0
    assert result["extra_runs"] <= result["in_flight_at_kills"]
    # Each host registered under its own name; the killed one's replacement too.
    names = set(result["hostnames"])
    assert len(names) == 3 and {"fleet-host-0", "fleet-host-1"} <= names
    assert "killed host fleet-host-" in err


def test_bad_host_counts_are_refused() -> None:
    proc = manage(
        "fleet",
        "--hosts",
        "two",
        "--force",
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "--hosts takes host counts such as 1,2,4,8" in err


def local_ports(pids: list[int]) -> set[int]:
    """The local TCP ports of the sockets the processes ``pids`` hold open."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def connections_of(worker: WorkerProcess) -> int:
    """Backends of the test database whose client is a process of this worker."""
    return connections_from([worker.pid, *children_of(worker.pid)])


def worker_connections() -> int:
    """Backends of the test database whose client is any live runworker process here."""
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and b"runworker" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return connections_from(pids)


def connections_from(pids: list[int]) -> int:
    from django.db import connection

    ports = local_ports(pids)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND client_port = ANY(%s)",
            [sorted(ports)],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.usefixtures("side_effects")
def test_a_worker_host_holds_the_documented_connections(tmp_path: Path) -> None:
    """--concurrency 2: per executor its queue connection (which also LISTENs) and the
    handlers' Django connection, plus the housekeeper's (docs/how-to/scaling.md: 2C + 1;
    tests/pgbouncer: the housekeeper's listener on JOBS_LISTEN_URL behind a pooler)."""
    from tests.tasks import basic

    expected = 2 * 2 + 1
    with running_worker(tmp_path, "--concurrency", "2") as worker:
        # Slow enough that both executors run handlers that use the ORM.
        basic.sleep_then_record.enqueue_many([((f"k{i}", 0.05), {}) for i in range(20)])
        wait_until(lambda: len(side_effect_counts()) == 20)
        wait_until(lambda: connections_of(worker) == expected, message=f"{expected} connections")
        assert connections_of(worker) == expected
        # A worker that stops leaves none behind.
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    wait_until(lambda: worker_connections() == 0, message="the stopped worker's connections closed")
