"""An import survives a worker killed in the middle of it (issue 16): chunks that were
running when the worker died come back through the reaper, chunks that had committed are
not applied again, and every row of the file ends up in the table exactly once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile

from jobs.models import Job
from reports import uploads
from reports.models import Customer, Import, ImportChunk
from tests.support.workers import running_worker, wait_until

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

ROWS = 30_000
CHUNK_ROWS = 500


def test_a_worker_killed_mid_import_leaves_every_row_imported_exactly_once(
    tmp_path: Path, media_root: Path, settings: object
) -> None:
    owner = User.objects.create_user("ann", "ann@example.com", "pw-ann-12345")
    lines = "".join(f"Person {n},person{n}@example.com,+49 {n},DE\n" for n in range(ROWS))
    upload = SimpleUploadedFile("big.csv", f"name,email,phone,country\n{lines}".encode())
    record = uploads.accept(upload=upload, owner=owner)
    env = {
        "MEDIA_ROOT": str(media_root),
        "REPORTS_IMPORT_CHUNK_ROWS": str(CHUNK_ROWS),
        "JOBS_LEASE_SECONDS": "2",
    }

    def progress() -> Import:
        return Import.objects.get(id=record.id)

    with running_worker(tmp_path, "--concurrency", "2", name="doomed", **env) as doomed:
        # Some chunks committed, the rest not yet: kill the whole worker (supervisor and
        # executors) without warning.
        wait_until(lambda: progress().chunks_done >= 3, timeout=60, interval=0.01, message="chunks to commit")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
    at_kill = progress()
    assert 0 < at_kill.rows_done < ROWS, "the import finished before the worker was killed"
    with running_worker(tmp_path, "--concurrency", "2", name="rescuer", **env):
        wait_until(lambda: progress().status == "finished", timeout=90, interval=0.2, message="the import")
    done = progress()
    chunks = ROWS // CHUNK_ROWS
    assert (done.total_rows, done.chunk_count, done.chunks_done) == (ROWS, chunks, chunks)
    assert (done.rows_done, done.inserted, done.updated, done.unchanged, done.rejected) == (
        ROWS,
        ROWS,
        0,
        0,
        0,
    )
    assert ImportChunk.objects.filter(job_import=done).count() == chunks
    assert Customer.objects.filter(owner=owner).count() == ROWS
    emails = set(Customer.objects.filter(owner=owner).values_list("email", flat=True))
    assert emails == {f"person{n}@example.com" for n in range(ROWS)}
    assert Job.objects.filter(task_path="reports.tasks.summarize_import").count() == 1
