"""What the queues hold, read from the aggregates the job table's triggers keep
(jobs/sql/functions/jobs_count_*.sql), never by counting job rows: the dashboard, ``manage.py jobs stats``
and the metrics endpoint all read these functions, at the same cost with ten jobs or ten
million.

* ``queue_stats()``: per queue, the jobs queued (due), scheduled, retrying, running and
  dead, the age of the oldest due job, and whether the queue is paused; and the live workers.
* ``throughput()``: attempts succeeded and failed per minute (or per ``step`` minutes).
* ``top_failing()``: the tasks that failed most in a recent window, with their latest error.
* ``compact()``: folds the appended change rows together (the housekeeper calls it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from .conf import WORKER_EXPIRE_AFTER_SECONDS as EXPIRE_AFTER_SECONDS

# The buckets jobs.stats reports per queue (the finished ones but 'dead' are counted too,
# for the console's estimates, but left out of the stats).
BUCKETS = ("queued", "scheduled", "retrying", "running", "dead")
# Throughput rows are kept this long.
THROUGHPUT_RETENTION = timedelta(hours=25)


def counts() -> dict[str, dict[str, int]]:
    """{queue: {bucket: jobs}} for every bucket with jobs, finished ones included."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT queue_name, bucket, sum(delta) FROM jobs_queue_count GROUP BY 1, 2 HAVING sum(delta) <> 0"
        )
        found: dict[str, dict[str, int]] = {}
        for queue, bucket, total in cursor.fetchall():
            found.setdefault(queue, {})[bucket] = int(total)
    return found


def queue_stats(*, now: datetime | None = None) -> dict[str, Any]:
    """``{"queues": {name: {queued, scheduled, retrying, running, dead, oldest_due_age_s,
    paused}}, "workers": n, "busy_workers": n, "jobs_in_hand": n}``. Queues are those with
    unfinished or dead jobs, paused ones, and those a live worker serves."""
    per_queue = counts()
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM jobs_paused_queue")
        paused = {name for (name,) in cursor.fetchall()}
        cursor.execute(
            """
            SELECT queues, jobs_in_hand FROM jobs_worker
            WHERE last_heartbeat_at >= coalesce(%s, now()) - %s * interval '1 second'
            """,
            [now, EXPIRE_AFTER_SECONDS],
        )
        workers = cursor.fetchall()
    served = {part.split(":")[0] for queues, _ in workers for part in queues.split(",") if part}
    names = {q for q, buckets in per_queue.items() if any(buckets.get(b) for b in BUCKETS)}
    names |= paused | served
    ages = oldest_due_ages([q for q in names if per_queue.get(q, {}).get("queued")], now=now)
    queues = {
        name: {
            **{bucket: per_queue.get(name, {}).get(bucket, 0) for bucket in BUCKETS},
            "oldest_due_age_s": ages.get(name),
            "paused": name in paused,
        }
        for name in sorted(names)
    }
    return {
        "queues": queues,
        "workers": len(workers),
        "busy_workers": sum(1 for _, in_hand in workers if in_hand),
        "jobs_in_hand": sum(in_hand for _, in_hand in workers),
    }


def oldest_due_ages(queues: list[str], *, now: datetime | None = None) -> dict[str, float]:
    """Seconds since the oldest due job of each queue came due. The claim index is ordered
    by priority first, so this walks its distinct priorities (a loose index scan: one
    index probe per priority in use) and takes the earliest due time of each."""
    if not queues:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT q.name,
                   extract(epoch FROM coalesce(%(now)s, statement_timestamp()) - (
                       WITH RECURSIVE levels(priority) AS (
                           (SELECT j.priority FROM jobs_job j
                            WHERE j.state = 'queued' AND j.queue_name = q.name
                            ORDER BY j.priority DESC LIMIT 1)
                           UNION ALL
                           SELECT (SELECT j.priority FROM jobs_job j
                                   WHERE j.state = 'queued' AND j.queue_name = q.name
                                     AND j.priority < levels.priority
                                   ORDER BY j.priority DESC LIMIT 1)
                           FROM levels WHERE levels.priority IS NOT NULL
                       )
                       SELECT min((SELECT j.run_at FROM jobs_job j
                                   WHERE j.state = 'queued' AND j.queue_name = q.name
                                     AND j.priority = levels.priority
                                   ORDER BY j.priority DESC, j.run_at LIMIT 1))
                       FROM levels WHERE levels.priority IS NOT NULL))
            FROM unnest(%(queues)s::text[]) AS q(name)
            """,
            {"queues": queues, "now": now},
        )
        return {name: max(0.0, float(age)) for name, age in cursor.fetchall() if age is not None}


def throughput(
    *, since: timedelta, step_minutes: int = 1, now: datetime | None = None
) -> list[tuple[datetime, int, int]]:
    """(slot, succeeded, failed) for every ``step_minutes`` over the last ``since``, oldest
    first, each slot labelled by its first minute, gaps filled with zeros: one range scan
    of the minute index, summed per slot."""
    step = timedelta(minutes=step_minutes)
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('minute', coalesce(%s, statement_timestamp()))", [now])
        last = cursor.fetchone()[0]
        first = last - since + step
        cursor.execute(
            """
            SELECT date_bin(%(step)s * interval '1 minute', minute, %(origin)s) AS slot,
                   sum(succeeded), sum(failed)
            FROM jobs_throughput
            WHERE minute >= %(origin)s AND minute <= %(last)s
            GROUP BY slot
            """,
            {"step": step_minutes, "origin": first, "last": last},
        )
        found = {slot: (int(ok), int(failed)) for slot, ok, failed in cursor.fetchall()}
    slots = []
    slot = first
    while slot <= last:
        ok, failed = found.get(slot, (0, 0))
        slots.append((slot, ok, failed))
        slot += step
    return slots


def top_failing(*, since: timedelta, limit: int = 5, now: datetime | None = None) -> list[dict[str, Any]]:
    """The tasks with the most failed attempts over the last ``since``: task, queue,
    failures, and the latest failure's error and job id."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT task_path, queue_name, sum(failed) AS failures,
                   (array_agg(last_error ORDER BY minute DESC, last_job_id DESC NULLS LAST)
                    FILTER (WHERE failed > 0))[1],
                   (array_agg(last_job_id ORDER BY minute DESC, last_job_id DESC NULLS LAST)
                    FILTER (WHERE failed > 0))[1]
            FROM jobs_throughput
            WHERE minute > coalesce(%(now)s, statement_timestamp()) - %(since)s * interval '1 second'
              AND failed > 0
            GROUP BY task_path, queue_name
            ORDER BY failures DESC, task_path
            LIMIT %(limit)s
            """,
            {"now": now, "since": since.total_seconds(), "limit": limit},
        )
        return [
            {"task": task, "queue": queue, "failures": int(n), "last_error": error, "last_job_id": job_id}
            for task, queue, n, error, job_id in cursor.fetchall()
        ]


def compact(cursor: Any = None, *, now: datetime | None = None) -> None:
    """Fold the appended rows into one per (queue, bucket) and one per (minute, queue,
    task), and drop throughput older than a day. Rows appended meanwhile are not seen by
    the DELETE and stay for the next time; two compactions at once each fold what they
    deleted, so nothing is counted twice. On ``cursor`` (a worker's), else Django's."""
    if cursor is None:
        with connection.cursor() as own:
            compact(own, now=now)
        return
    cursor.execute(
        """
        WITH gone AS (DELETE FROM jobs_queue_count RETURNING queue_name, bucket, delta)
        INSERT INTO jobs_queue_count (queue_name, bucket, delta)
        SELECT queue_name, bucket, sum(delta) FROM gone GROUP BY 1, 2 HAVING sum(delta) <> 0
        """
    )
    cursor.execute(
        """
        WITH gone AS (DELETE FROM jobs_throughput RETURNING *)
        INSERT INTO jobs_throughput (minute, queue_name, task_path, succeeded, failed, last_error,
                                     last_job_id)
        SELECT minute, queue_name, task_path, sum(succeeded), sum(failed),
               coalesce((array_agg(last_error ORDER BY last_job_id DESC NULLS LAST)
                         FILTER (WHERE failed > 0))[1], ''),
               max(last_job_id::text)::uuid
        FROM gone
        WHERE minute > coalesce(%(now)s, statement_timestamp()) - %(keep)s * interval '1 second'
        GROUP BY 1, 2, 3
        """,
        {"now": now, "keep": THROUGHPUT_RETENTION.total_seconds()},
    )
