"""How fast the console answers with a big job table: ``scripts/bench console``.

Fills the (benchmark) database with finished jobs in one INSERT ... SELECT generate_series
(time-ordered ids over the last week, four queues, ten tasks, a share of dead ones with
errors), a backlog of queued ones and a day of throughput, then times the pages an operator
opens: the job list, each filter, the search, a detail page, the dashboard, and
jobs.stats.queue_stats(). Each figure is the median of ``--repeat`` requests after one to
warm up. The dashboard is meant to answer in under 100 ms.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test import Client
from django.test.utils import override_settings

from jobs import stats
from lab.management.bench import add_force_option, require_bench_database

FILL = """
INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs, run_at, attempt,
                      max_attempts, lease_seconds, worker_ids, created_at, started_at,
                      last_attempted_at, finished_at, result, errors, last_error, trace_id, dedupe_key)
SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(n::text), 1, 3) || '8' || substr(md5(n::text || 'x'), 1, 15))::uuid,
       'bench.tasks.task_' || (n %% 10), (ARRAY['default', 'email', 'push', 'reports'])[1 + n %% 4], 0,
       CASE WHEN n %% 20 = 0 THEN 'dead' WHEN n %% 50 = 1 THEN 'cancelled' ELSE 'succeeded' END,
       jsonb_build_array(n), '{}', t, 1, 3, 300, '{}', t, t, t, t + interval '40 milliseconds',
       CASE WHEN n %% 20 = 0 THEN NULL ELSE 'null'::jsonb END,
       CASE WHEN n %% 20 = 0
            THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'exception', 'smtplib.SMTPException',
                                                      'message', 'mailbox ' || n || ' unavailable',
                                                      'traceback', 'Traceback ...'))
            ELSE '[]' END,
       CASE WHEN n %% 20 = 0 THEN 'mailbox ' || n || ' unavailable' ELSE '' END,
       CASE WHEN n %% 1000 = 0 THEN 'order-' || n ELSE '' END,
       CASE WHEN n %% 100 = 0 THEN 'welcome:' || n END
FROM generate_series(1, %(rows)s) AS n,
     LATERAL (SELECT now() - interval '7 days' + n * (interval '7 days' / %(rows)s)) AS at(t)
"""

BACKLOG = """
INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs, run_at, max_attempts)
SELECT gen_random_uuid(), 'bench.tasks.task_' || (n %% 10), (ARRAY['default', 'email'])[1 + n %% 2],
       n %% 3, 'queued',
       '[]', '{}', now() - n * interval '10 milliseconds', 3
FROM generate_series(1, %(rows)s) AS n
"""

THROUGHPUT = """
INSERT INTO jobs_throughput (minute, queue_name, task_path, succeeded, failed, last_error, last_job_id)
SELECT date_trunc('minute', now()) - m * interval '1 minute', q, 'bench.tasks.task_' || k,
       50 + (m * k) %% 40, (m + k) %% 7,
       CASE WHEN (m + k) %% 7 > 0 THEN 'mailbox unavailable' ELSE '' END, NULL
FROM generate_series(0, 1439) AS m, unnest(ARRAY['default', 'email', 'push', 'reports']) AS q,
     generate_series(0, 9) AS k
"""


class Command(BaseCommand):
    help = "Time the console's pages on a table of a million finished jobs (empties the job table)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rows", type=int, default=1_000_000, help="finished jobs to insert")
        parser.add_argument("--backlog", type=int, default=20_000, help="queued jobs to insert")
        parser.add_argument("--repeat", type=int, default=5, help="requests per figure (median)")
        parser.add_argument("--keep", action="store_true", help="reuse the rows of the previous run")
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job table", suite="console")
        if not options["keep"]:
            self._fill(options["rows"], options["backlog"])
        user, _ = get_user_model().objects.get_or_create(
            username="bench-console", defaults={"is_staff": True, "is_superuser": True}
        )
        client = Client()
        client.force_login(user)
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM jobs_job WHERE state = 'dead' ORDER BY id DESC LIMIT 1")
            dead_id = cursor.fetchone()[0]
        pages = {
            "list (newest first)": "/admin/jobs/job/",
            "list page 20": "/admin/jobs/job/?p=20",
            "filter state=dead": "/admin/jobs/job/?state=dead",
            "filter state=succeeded": "/admin/jobs/job/?state=succeeded",
            "filter state=queued": "/admin/jobs/job/?state=queued",
            "filter state=retrying": "/admin/jobs/job/?state=retrying",
            "filter queue=email": "/admin/jobs/job/?queue=email",
            "filter task": "/admin/jobs/job/?task=bench.tasks.task_3",
            "filter dead+queue+task": "/admin/jobs/job/?state=dead&queue=default&task=bench.tasks.task_0",
            "filter created=1h": "/admin/jobs/job/?created=1h",
            "search error text": "/admin/jobs/job/?q=mailbox+4242+unavail",
            "search dedupe key": "/admin/jobs/job/?q=welcome:500",
            "search trace id": "/admin/jobs/job/?q=order-7000",
            "search job id": f"/admin/jobs/job/?q={dead_id}",
            "detail page": f"/admin/jobs/job/{dead_id}/change/",
            "dashboard": "/admin/jobs/job/dashboard/",
            "dashboard refresh": "/admin/jobs/job/dashboard/?part=body",
        }
        self.stdout.write(f"{'page':<28}{'median ms':>11}{'max ms':>9}")
        with override_settings(ALLOWED_HOSTS=["*"], DEBUG=False):
            for label, url in pages.items():
                timings = self._time(
                    lambda url=url: _ok(client.get(url, secure=True), url), options["repeat"]
                )
                self._line(label, timings)
        self._line("jobs.stats.queue_stats()", self._time(stats.queue_stats, options["repeat"]))
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM jobs_queue_count")
            deltas = cursor.fetchone()[0]
        self.stdout.write(f"(count rows read by the stats: {deltas})")

    def _fill(self, rows: int, backlog: int) -> None:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE jobs_job")
            cursor.execute("TRUNCATE jobs_throughput")
            cursor.execute(FILL, {"rows": rows})
            cursor.execute(BACKLOG, {"rows": backlog})
            cursor.execute(THROUGHPUT, {})
        stats.compact()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE jobs_job")
            cursor.execute("VACUUM ANALYZE jobs_throughput")
        self.stderr.write(
            f"inserted {rows:,} finished and {backlog:,} queued jobs in {time.perf_counter() - started:.1f}s"
        )

    @staticmethod
    def _time(call: Any, repeat: int) -> list[float]:
        call()
        timings = []
        for _ in range(max(repeat, 1)):
            started = time.perf_counter()
            call()
            timings.append((time.perf_counter() - started) * 1000)
        return timings

    def _line(self, label: str, timings: list[float]) -> None:
        self.stdout.write(f"{label:<28}{statistics.median(timings):>11.1f}{max(timings):>9.1f}")


def _ok(response: Any, url: str) -> None:
    if response.status_code != 200:
        raise CommandError(f"{url} answered {response.status_code}")
