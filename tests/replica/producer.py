"""Run in ``manage.py shell``: enqueue jobs one per transaction until a stop file appears,
printing each job whose commit the database acknowledged (``<id> <key>``). A lost
connection (the primary crashed, the replica is not promoted yet) is retried on a new one."""

from __future__ import annotations

import os
import time

import psycopg
from django.db import DatabaseError, connection

from tests.tasks import basic


def main(stop_file: str) -> None:
    n = 0
    while not os.path.exists(stop_file):
        key = f"job-{n}"
        try:
            job_id = basic.record.enqueue(key).id
        except (DatabaseError, psycopg.Error):
            # Not acknowledged: it may or may not have committed, so it is not counted.
            connection.close()
            time.sleep(0.05)
            continue
        print(job_id, key, flush=True)
        n += 1
        time.sleep(0.01)
