"""Pushes per second from real ``runworker --burst`` processes to a no-op APNs on loopback
(``loopback_apns.py``), with 1 and 2 executor processes: the cost of one push on our side.

Each run empties the push tables and the job table of a benchmark database, registers
``count`` iOS devices, fans one notification out to them (one bulk insert) and drains the
push queue. The rate is deliveries divided by the time from the first claim to the last
recorded outcome, as in ``lab/benchmark.py``; the wall rate includes process start-up.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from notifications.push import services
from notifications.push.models import DeliveryStatus, Device, PushDelivery

from .loopback_apns import LoopbackAPNs, write_credentials

ROOT = Path(__file__).resolve().parents[1]
USER_PREFIX = "bench-push-"
DEVICES_PER_USER = 4


def _reset() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE notifications_push_delivery, notifications_push_notification, "
            "notifications_push_device, jobs_job"
        )
    get_user_model().objects.filter(username__startswith=USER_PREFIX).delete()


def _fan_out(count: int) -> None:
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"{USER_PREFIX}{n}") for n in range(-(-count // DEVICES_PER_USER))
    )
    Device.objects.bulk_create(
        Device(user=users[n // DEVICES_PER_USER], platform="ios", token=f"{n:064x}") for n in range(count)
    )
    services.notify_users(
        users=get_user_model().objects.filter(username__startswith=USER_PREFIX),
        title="Benchmark",
        body="no-op",
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")


def _worker_env(server: LoopbackAPNs, cert_file: Path, p8_file: Path) -> dict[str, str]:
    db = settings.DATABASES["default"]
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"postgres://{db['USER'] or ''}@{host}/{db['NAME']}",
        PYTHONPATH=str(ROOT),
        JOBS_LOG_LEVEL="WARNING",
        PUSH_BACKEND="notifications.push.providers.platforms.PlatformBackend",
        PUSH_APNS_BASE_URL=server.url,
        PUSH_APNS_KEY_FILE=str(p8_file),
        PUSH_APNS_KEY_ID="BENCH12345",
        PUSH_APNS_TEAM_ID="BENCHTEAM1",
        PUSH_APNS_TOPIC="com.example.bench",
        PUSH_CA_BUNDLE=str(cert_file),
    )
    return env


def measure(
    count: int, concurrency: int, *, server: LoopbackAPNs, env: dict[str, str]
) -> tuple[float, float]:
    """(pushes/s from first claim to last outcome, pushes/s of the whole runworker)."""
    _reset()
    _fan_out(count)
    before = server.requests
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "runworker",
            "--burst",
            "--queues=push",
            f"--concurrency={concurrency}",
        ],
        env=env,
        check=True,
    )
    wall = time.perf_counter() - started
    delivered = PushDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count()
    if delivered != count or server.requests - before != count:
        raise RuntimeError(f"{delivered} of {count} delivered, {server.requests - before} requests seen")
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM jobs_job")
        span = float(cursor.fetchone()[0])
    return count / span, count / wall


def run(*, runs: int, count: int, echo: Callable[[str], None]) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-push-") as directory:
        cert_file, key_file, p8_file = write_credentials(Path(directory))
        server = LoopbackAPNs(cert_file=cert_file, key_file=key_file).start()
        env = _worker_env(server, cert_file, p8_file)
        try:
            for number in range(1, runs + 1):
                echo(f"run {number}/{runs}")
                for concurrency in (1, 2):
                    in_db, wall = measure(count, concurrency, server=server, env=env)
                    figures.setdefault(f"push_{concurrency}_proc_per_s", []).append(in_db)
                    figures.setdefault(f"push_{concurrency}_proc_wall_per_s", []).append(wall)
        finally:
            server.stop()
            _reset()
    return figures


def medians(figures: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in figures.items()}
