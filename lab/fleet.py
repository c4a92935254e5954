"""Many worker hosts against one PostgreSQL: a drill and a measurement.

Each simulated host is one ``runworker`` in a process group (session) of its own, with its
own host name in the registry (``JOBS_HOSTNAME``) and its own connections: ``executors``
claiming connections, the housekeeper's and the listener's. For each host count the drill
enqueues the same jobs, starts the hosts, optionally SIGKILLs one whole host (the process
group: supervisor, housekeeper, executors) part-way and starts a replacement, and waits for
the queue to drain. It reports the throughput, the CPU share of PostgreSQL's processes and
of the hosts' processes (read from /proc), and checks the side effects: handlers record
theirs in ``fleet_effects`` keyed by job (an idempotent write, as invariant 10 asks), so
every job must have exactly one effect row, and only jobs in flight on a killed host may
have run twice.

Run through ``scripts/fleet`` (a dedicated database; the job table is emptied).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.tasks import task

from jobs.backend import enqueue_many
from jobs.states import UNFINISHED

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


@task(max_attempts=25, backoff_base=0.2, backoff_cap=1.0)  # type: ignore[call-overload]
def fleet_work(key: str, millis: float, effect: bool = True) -> None:
    if millis:
        time.sleep(millis / 1000)
    if not effect:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO fleet_effects (key) VALUES (%s)"
            " ON CONFLICT (key) DO UPDATE SET runs = fleet_effects.runs + 1",
            [key],
        )


@dataclass
class Host:
    name: str
    proc: subprocess.Popen[bytes]


@dataclass
class Round:
    """One host count: start the hosts, drain the queue, maybe kill one host."""

    hosts: int
    executors: int
    jobs: int
    millis: float
    kill: bool
    # Handlers record a side effect (a commit of their own each) or do nothing at all.
    effects: bool
    echo: Callable[[str], None]
    running: list[Host] = field(default_factory=list)
    kills: int = 0
    in_flight_at_kills: int = 0
    hostnames: set[str] = field(default_factory=set)

    def env(self, name: str) -> dict[str, str]:
        db = settings.DATABASES["default"]
        env = dict(os.environ)
        env.update(
            DATABASE_URL=(
                f"postgres://{db['USER'] or ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
            ),
            PYTHONPATH=str(ROOT),
            JOBS_HOSTNAME=name,
            JOBS_LOG_LEVEL="WARNING",
            JOBS_LEASE_SECONDS="3",
            JOBS_REAPER_INTERVAL="1",
            JOBS_POLL_INTERVAL="0.5",
            JOBS_BACKOFF_BASE="0.2",
            JOBS_BACKOFF_CAP="1",
        )
        return env

    def start_host(self, name: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworker", f"--concurrency={self.executors}"],
            env=self.env(name),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.running.append(Host(name, proc))

    def kill_one(self) -> None:
        victim = random.choice(self.running)
        in_flight = _in_flight(victim.name)
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        self.running.remove(victim)
        self.kills += 1
        self.in_flight_at_kills += in_flight
        self.echo(f"  killed host {victim.name} (its whole process group) with {in_flight} job(s) in hand")
        self.start_host(f"{victim.name}-replacement")

    def setup(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE jobs_job, jobs_worker")
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS fleet_effects (key text PRIMARY KEY, runs int NOT NULL DEFAULT 1)"
            )
            cursor.execute("TRUNCATE fleet_effects")
            cursor.execute("CHECKPOINT")

    def enqueue(self) -> None:
        calls: list[tuple[tuple[str, float, bool], dict[str, Any]]] = [
            ((f"k{i}", self.millis, self.effects), {}) for i in range(self.jobs)
        ]
        for start in range(0, len(calls), 5000):
            enqueue_many(fleet_work, calls[start : start + 5000])

    def run(self, timeout: float) -> dict[str, Any]:
        self.setup()
        started = time.monotonic()
        for i in range(self.hosts):
            self.start_host(f"fleet-host-{i}")
        # Measured from when every host is up and idle: start-up is not the drain.
        while len(_hostnames()) < self.hosts:
            if time.monotonic() - started > timeout:
                raise TimeoutError("the hosts did not start")
            time.sleep(0.1)
        sampler = CpuSampler()
        sampler.sample(pgids=[host.proc.pid for host in self.running])
        syncs = _wal_syncs()
        self.enqueue()
        killed = not self.kill
        try:
            while (left := _unfinished()) > 0:
                if time.monotonic() - started > timeout:
                    raise TimeoutError(f"{left} jobs unfinished after {timeout}s")
                if not killed and left <= self.jobs * 0.7:
                    self.kill_one()
                    killed = True
                self.hostnames |= _hostnames()
                sampler.sample(pgids=[host.proc.pid for host in self.running])
                time.sleep(0.2)
            sampler.sample(pgids=[host.proc.pid for host in self.running])
        finally:
            for host in self.running:
                with contextlib.suppress(ProcessLookupError):
                    host.proc.send_signal(signal.SIGTERM)
            for host in self.running:
                try:
                    host.proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(host.proc.pid, signal.SIGKILL)
                    host.proc.wait()
        wal_syncs_per_second = (_wal_syncs() - syncs) / max(sampler.last - sampler.first, 1e-9)
        return {**self.result(), **sampler.shares(), "wal_syncs_per_second": round(wal_syncs_per_second)}

    def result(self) -> dict[str, Any]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*),"
                " extract(epoch FROM max(finished_at) - min(started_at)) FROM jobs_job"
            )
            succeeded, total, seconds = cursor.fetchone()
            cursor.execute(
                "SELECT count(*), count(*) FILTER (WHERE runs > 1), coalesce(sum(runs - 1), 0)"
                " FROM fleet_effects"
            )
            effects, rerun, extra_runs = cursor.fetchone()
        return {
            "hosts": self.hosts,
            "executors_per_host": self.executors,
            "jobs": total,
            "succeeded": succeeded,
            "effect_rows": effects,
            "lost": (self.jobs - effects if self.effects else 0) + (total - succeeded),
            "ran_twice": rerun,
            "extra_runs": int(extra_runs),
            "kills": self.kills,
            "in_flight_at_kills": self.in_flight_at_kills,
            "hostnames": sorted(self.hostnames),
            "seconds": round(float(seconds or 0), 2),
            "jobs_per_second": round(total / float(seconds)) if seconds else None,
        }


class CpuSampler:
    """CPU time of PostgreSQL's processes (this database's backends and the server's
    background processes) and of the hosts' process groups, from /proc/<pid>/stat, counted
    from the first sample on."""

    def __init__(self) -> None:
        # pid -> (CPU seconds at its first sample, or 0 if it started since; the latest).
        self.postgres: dict[int, tuple[float, float]] = {}
        self.hosts: dict[int, tuple[float, float]] = {}
        self.first = 0.0
        self.last = 0.0

    def sample(self, pgids: list[int]) -> None:
        first = not self.first
        now = time.monotonic()
        self.first = self.first or now
        self.last = now
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR datname IS NULL"
            )
            postgres = [row[0] for row in cursor.fetchall()]
        wanted = set(pgids)
        hosts = []
        for entry in Path("/proc").iterdir():
            if (
                entry.name.isdigit()
                and (stat := _stat(int(entry.name))) is not None
                and int(stat[2]) in wanted
            ):
                hosts.append(int(entry.name))
        for pids, seen in ((postgres, self.postgres), (hosts, self.hosts)):
            for pid in pids:
                cpu = _cpu_seconds(pid)
                if cpu is not None:
                    seen[pid] = (seen[pid][0] if pid in seen else cpu if first else 0.0, cpu)

    def shares(self) -> dict[str, float]:
        wall = max(self.last - self.first, 1e-9) * (os.cpu_count() or 1)
        return {
            "postgres_cpu_share": round(sum(b - a for a, b in self.postgres.values()) / wall, 3),
            "hosts_cpu_share": round(sum(b - a for a, b in self.hosts.values()) / wall, 3),
        }


def _stat(pid: int) -> list[str] | None:
    try:
        # The command name may contain spaces and parentheses: split after the last ')'.
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _cpu_seconds(pid: int) -> float | None:
    stat = _stat(pid)
    return None if stat is None else (int(stat[11]) + int(stat[12])) / TICKS


def _wal_syncs() -> int:
    """WAL flushes to disk so far (the whole server's: each commit that waited for one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT wal_sync FROM pg_stat_wal")
        return int(cursor.fetchone()[0])


def _in_flight(hostname: str) -> int:
    """Jobs held (claimed, not yet recorded) by the host ``hostname``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM jobs_job j JOIN jobs_worker w ON j.worker_id = ANY(w.slot_tokens) "
            "WHERE w.hostname = %s AND j.state = 'running'",
            [hostname],
        )
        return int(cursor.fetchone()[0])


def _hostnames() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT hostname FROM jobs_worker")
        return {row[0] for row in cursor.fetchall()}


def _unfinished() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_job WHERE state = ANY(%s)", [sorted(UNFINISHED)])
        return int(cursor.fetchone()[0])
