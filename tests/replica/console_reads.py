"""Run in ``manage.py shell`` on the primary with DATABASE_REPLICA_URL set (see
test_replica.py): what the console's read views, the ORM and the writes see while the
replica's replay is paused, and after it resumes. Prints one JSON object."""

from __future__ import annotations

import json
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

from jobs.console import replica
from jobs.models import Job
from tests.tasks import basic


def _replica(sql: str) -> Any:
    with connections["replica"].cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def _look(client: Client, job_id: str) -> dict[str, Any]:
    with replica.using_replica():
        on_replica = Job.objects.filter(id=job_id).exists()
    return {
        "status_api": client.get(f"/api/jobs/{job_id}").status_code,
        "in_job_list": job_id in client.get("/admin/jobs/job/").content.decode(),
        "on_primary": Job.objects.filter(id=job_id).exists(),
        "on_replica": on_replica,
        "lag": replica.lag_seconds(),
        "index_shows_lag": "Read replica:" in client.get("/admin/").content.decode(),
    }


def main() -> None:
    user = get_user_model().objects.create_superuser("operator", "operator@example.com", "x" * 20)
    client = Client()
    client.force_login(user)
    _replica("SELECT pg_wal_replay_pause()::text")
    while _replica("SELECT pg_get_wal_replay_pause_state()") != "paused":
        time.sleep(0.02)
    # A write inside the replica context still goes to the primary.
    with replica.using_replica():
        job_id = str(basic.add.enqueue(1, 2).id)
    paused = _look(client, job_id)
    _replica("SELECT pg_wal_replay_resume()::text")
    deadline = time.monotonic() + 15
    while not _look(client, job_id)["on_replica"] and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"paused": paused, "resumed": _look(client, job_id)}))
