"""Chaos drill: run jobs through several workers while killing workers at random and
restarting PostgreSQL once, then check that nothing was lost and duplicates stayed within
the jobs that were in flight at each kill.

Run through ``scripts/chaos`` (a dedicated database). Handlers record their side effect in
``chaos_effects`` outside the job's own write, as a real handler's email or push would be:
a worker killed after the side effect and before recording the outcome runs it again.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.tasks import task

from jobs.backend import enqueue_many

ROOT = Path(__file__).resolve().parent.parent


@task(max_attempts=25, backoff_base=0.2, backoff_cap=2.0)  # type: ignore[call-overload]
def chaos_work(key: str, millis: int) -> None:
    time.sleep(millis / 1000)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO chaos_effects (key) VALUES (%s)", [key])


@dataclass
class Drill:
    jobs: int
    workers: int
    concurrency: int
    kill_every: tuple[float, float]
    restart_postgres: bool
    echo: Callable[[str], None]
    quiet: bool = True
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    kills: int = 0
    in_flight_at_kills: int = 0

    def env(self) -> dict[str, str]:
        db = settings.DATABASES["default"]
        env = dict(os.environ)
        env.update(
            DATABASE_URL=f"postgres://{db['USER'] or ''}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}",
            PYTHONPATH=str(ROOT),
            JOBS_LOG_LEVEL="WARNING",
            JOBS_LEASE_SECONDS="3",
            JOBS_REAPER_INTERVAL="1",
            JOBS_POLL_INTERVAL="0.5",
            # Jobs of killed workers come back through the reaper, with this backoff.
            JOBS_BACKOFF_BASE="0.2",
            JOBS_BACKOFF_CAP="2",
        )
        return env

    def start_worker(self) -> None:
        self.procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", f"--concurrency={self.concurrency}"],
                env=self.env(),
                stderr=subprocess.DEVNULL if self.quiet else None,
            )
        )

    def setup(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE jobs_job, jobs_worker")
            cursor.execute("CREATE TABLE IF NOT EXISTS chaos_effects (key text NOT NULL)")
            cursor.execute("TRUNCATE chaos_effects")
        calls: list[tuple[tuple[str, int], dict[str, object]]] = [
            ((f"k{i}", random.randint(5, 60)), {}) for i in range(self.jobs)
        ]
        for start in range(0, len(calls), 5000):
            enqueue_many(chaos_work, calls[start : start + 5000])

    def kill_one(self) -> None:
        victim = random.choice(self.procs)
        in_flight = _in_flight(victim.pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.procs.remove(victim)
        self.kills += 1
        self.in_flight_at_kills += in_flight
        self.echo(f"killed worker pid={victim.pid} with {in_flight} job(s) in hand")
        self.start_worker()

    def run(self, timeout: float) -> dict[str, int | float]:
        self.setup()
        started = time.monotonic()
        for _ in range(self.workers):
            self.start_worker()
        next_kill = time.monotonic() + random.uniform(*self.kill_every)
        restart_at = started + 6 if self.restart_postgres else float("inf")
        try:
            while _unfinished() > 0:
                now = time.monotonic()
                if now - started > timeout:
                    raise TimeoutError(f"{_unfinished()} jobs unfinished after {timeout}s")
                if now >= restart_at:
                    restart_at = float("inf")
                    self.echo("restarting PostgreSQL")
                    connection.close()
                    _restart_postgres()
                    self.echo("PostgreSQL is back")
                elif now >= next_kill:
                    self.kill_one()
                    next_kill = now + random.uniform(*self.kill_every)
                time.sleep(0.2)
        finally:
            for proc in self.procs:
                proc.send_signal(signal.SIGTERM)
            for proc in self.procs:
                proc.wait(60)
        elapsed = time.monotonic() - started
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FROM jobs_job")
            succeeded, total = cursor.fetchone()
            cursor.execute("SELECT count(*) FROM (SELECT key FROM chaos_effects GROUP BY key) k")
            (effect_keys,) = cursor.fetchone()
            cursor.execute(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM chaos_effects GROUP BY key) k"
            )
            (duplicates,) = cursor.fetchone()
        return {
            "jobs": total,
            "succeeded": succeeded,
            "lost": self.jobs - effect_keys + (total - succeeded),
            "duplicates": int(duplicates),
            "kills": self.kills,
            "in_flight_at_kills": self.in_flight_at_kills,
            "seconds": round(elapsed, 1),
        }


def _in_flight(pid: int) -> int:
    """Jobs held (claimed, not yet recorded) by the worker process ``pid``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM jobs_job j JOIN jobs_worker w ON j.worker_id = ANY(w.slot_tokens) "
            "WHERE w.pid = %s AND j.state = 'running'",
            [pid],
        )
        return int(cursor.fetchone()[0])


def _unfinished() -> int:
    for _ in range(60):
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM jobs_job WHERE state IN ('scheduled', 'queued', 'running')"
                )
                return int(cursor.fetchone()[0])
        except Exception:  # noqa: BLE001 - the database may be restarting
            connection.close()
            time.sleep(0.5)
    raise RuntimeError("database did not come back")


def _restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True)
