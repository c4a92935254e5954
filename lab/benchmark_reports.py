"""Reports and imports at size, with real ``runworker --burst`` processes:

* a customers report of ``rows`` rows, built by one executor: rows per second (the job's
  run time, from its start to its outcome) and the executor's peak resident memory, next
  to the peak for a report a tenth the size (streaming keeps the two about equal);
* a CSV import of ``rows`` rows, end to end (from the upload's checks and storing to the
  summary written) with 2 executor processes: rows per second and their peak memory.

It empties the job table and the reports tables of its database (a *bench* one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files import File
from django.db import connection
from django.test.utils import override_settings
from django.utils import timezone

from jobs.models import Job
from reports import uploads
from reports.models import Import, ImportStatus
from reports.tasks import build_report

ROOT = Path(__file__).resolve().parents[1]
USERNAME = "bench-reports"


def _reset() -> Any:
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE jobs_job, reports_import_rejection, reports_import_chunk, reports_import, "
            "reports_customer"
        )
    users = get_user_model().objects
    users.filter(username=USERNAME).delete()
    return users.create_user(USERNAME, "bench@example.com", None)


def _worker(concurrency: int, media: str) -> subprocess.Popen[bytes]:
    db = settings.DATABASES["default"]
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"postgres://{db['USER'] or ''}@{host}/{db['NAME']}",
        PYTHONPATH=str(ROOT),
        MEDIA_ROOT=media,
        JOBS_LOG_LEVEL="WARNING",
        REPORTS_IMPORT_CHUNK_ROWS=str(settings.REPORTS_IMPORT_CHUNK_ROWS),
    )
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=env,
    )


def _executors(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            if int(stat.rpartition(")")[2].split()[1]) == pid and comm.startswith("jobs-executor"):
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _peak_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _watch(proc: subprocess.Popen[bytes]) -> float:
    """Wait for the worker to exit; the highest peak RSS (MiB) of any of its executors."""
    peaks: dict[int, float] = {}
    while proc.poll() is None:
        for pid in _executors(proc.pid):
            peaks[pid] = max(peaks.get(pid, 0.0), _peak_mib(pid))
        time.sleep(0.05)
    if proc.returncode != 0:
        raise RuntimeError(f"runworker exited {proc.returncode}")
    return max(peaks.values(), default=0.0)


def measure_report(rows: int, media: str) -> tuple[float, float]:
    """(rows/s, executor peak RSS MiB) of a customers report of ``rows`` rows."""
    user = _reset()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO reports_customer (owner_id, name, email, phone, country, created_at, updated_at)
            SELECT %s, 'Customer ' || n, 'customer' || n || '@example.com', '+49 30 ' || n, 'DE', now(), now()
            FROM generate_series(1, %s) AS n
            """,
            [user.pk, rows],
        )
        cursor.execute("VACUUM ANALYZE reports_customer")
    result = build_report.using(owner=user).enqueue("customers", {}, user.pk)
    peak = _watch(_worker(1, media))
    job = Job.objects.get(id=result.id)
    if job.state != "succeeded" or (job.result or {}).get("rows") != rows:
        raise RuntimeError(f"the report did not finish: {job.state} {job.last_error}")
    assert job.finished_at is not None and job.last_attempted_at is not None
    return rows / (job.finished_at - job.last_attempted_at).total_seconds(), peak


def measure_import(rows: int, media: str, folder: Path) -> tuple[float, float, float]:
    """(rows/s end to end, executors' peak RSS MiB, CSV MB) of a ``rows``-row import."""
    user = _reset()
    path = folder / "customers.csv"
    with path.open("w") as handle:
        handle.write("name,email,phone,country\n")
        for start in range(0, rows, 10_000):
            handle.write(
                "".join(
                    f"Customer {n},customer{n}@example.com,+49 30 {n},DE\n"
                    for n in range(start, min(start + 10_000, rows))
                )
            )
    started = timezone.now()
    with override_settings(MEDIA_ROOT=media), path.open("rb") as handle:
        record = uploads.accept(upload=File(handle, name="customers.csv"), owner=user)  # type: ignore[arg-type]
    peak = _watch(_worker(2, media))
    record = Import.objects.get(id=record.id)
    if record.status != ImportStatus.FINISHED or record.inserted != rows:
        raise RuntimeError(f"the import did not finish: {record.status}, {record.inserted} inserted")
    assert record.finished_at is not None
    return rows / (record.finished_at - started).total_seconds(), peak, path.stat().st_size / 1e6


def run(*, report_rows: int, import_rows: int, echo: Callable[[str], None]) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-reports-") as tmp:
        media = str(Path(tmp, "media"))
        small = max(report_rows // 10, 1)
        echo(f"report of {small:,} rows")
        figures[f"report_{small}_rows_per_s"], figures[f"report_{small}_peak_rss_mib"] = measure_report(
            small, media
        )
        echo(f"report of {report_rows:,} rows")
        figures[f"report_{report_rows}_rows_per_s"], figures[f"report_{report_rows}_peak_rss_mib"] = (
            measure_report(report_rows, media)
        )
        echo(f"import of {import_rows:,} rows, 2 executors")
        rate, peak, size = measure_import(import_rows, media, Path(tmp))
        figures[f"import_{import_rows}_rows_per_s"] = rate
        figures[f"import_{import_rows}_peak_rss_mib"] = peak
        figures[f"import_{import_rows}_csv_mb"] = size
    _reset()
    return figures
