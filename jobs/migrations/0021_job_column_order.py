"""The job table is rewritten with the columns its transitions change at the end of the row,
and its pages filled to 50%.

A claim and an outcome each write a new version of the job's row. When that version stays
on its page, PostgreSQL logs only the bytes between the common prefix and the common suffix
of the old and the new tuple. The state, the attempt and the lease sat near the front of the
row, and the times and the errors in its middle, so almost the whole tuple was logged each
time: the task, its arguments and its options, which never change after the enqueue. Now
they come first, then the columns that change rarely (a cancel request, progress, errors,
a retry's run_at), then the outcome's own (result, finished_at), the columns both the claim
and the outcome change (state, holder, lease), and last the claim's (attempt, worker_ids,
start times).

That saves bytes only where the new version stays on its page. A claim takes every due row
of a page in one transaction; at 70% a page had room for the new versions of about 10 of
its 24 rows, so 60% of them moved to another page, whole. At 50% it has room for most of
them: a page holds fewer rows, and page pruning reclaims the dead versions as before, so
the table after a drain is no larger (docs/explanation/hot-path.md).

Measured with the layout prototype (``scripts/bench layout --jobs 5000 --heartbeats
1000``), WAL per no-op job: 1,450 bytes before, 1,387 with the new order alone, 1,359 with
pages at 50% alone, 1,270 with both; the outcome 437 -> 326, the claim 511 -> 442. The
engine's own figure (``scripts/bench``, ``wal_bytes_per_job``): 1,455 -> 1,265. Jobs with
arguments gain more, as their arguments no longer travel with each claim and outcome:
2,093 -> 1,519 bytes with 200 bytes of argument, 4,474 -> 2,263 with 1,000. The state,
read now from the 39th column rather than the 5th, cost PostgreSQL no CPU that could be
measured (drains of 100,000 jobs and batches of claims and outcomes, run in rotation).

PostgreSQL cannot move a column, so the table is copied: a new table with the columns in
this order, the rows copied by one INSERT ... SELECT, the old table dropped and the new one
renamed, then its constraints, indexes and triggers made again from the old one's own
definitions (with their names), its privileges granted again, and the table analysed. The
count triggers are created after the copy, so the queue counts (jobs_queue_count) stay as
they are, right. The copied rows fill whole pages (most are finished and will not change
again); the fillfactor applies to rows inserted afterwards. This holds an ACCESS EXCLUSIVE
lock on jobs_job for the whole copy: enqueues, claims and outcomes wait. A table of
1,000,000 rows (492 MB with its indexes) took 12 seconds here, and came out at 367 MB.
Workers running meanwhile wait, then go on. Run it at a quiet moment; the reverse restores
the previous order and 70%.
"""

from __future__ import annotations

import re

from django.db import migrations
from jobs.migrations import APP_LABEL

# The order before this migration (the order in which the columns were added).
PREVIOUS_ORDER = (
    "id", "task_path", "queue_name", "priority", "state", "args", "kwargs", "run_at", "attempt",
    "max_attempts", "timeout", "lease_seconds", "lease_expires_at", "worker_id", "worker_ids",
    "created_at", "started_at", "last_attempted_at", "finished_at", "result", "errors",
    "last_error", "dedupe_key", "dedupe_until", "dedupe_lapsed", "trace_id", "backoff_base",
    "backoff_cap", "expires_at", "owner", "public", "handbacks", "jitter", "non_retryable",
    "soft_timeout", "started_attempt", "limit_key", "limit_name", "limit_reserved", "limit_wait",
    "edits", "workflow_node", "workflow_position", "progress", "cancel_requested_at",
)  # fmt: skip

ORDER = (
    # Written once, at the enqueue.
    "id", "task_path", "queue_name", "priority", "args", "kwargs", "max_attempts", "timeout",
    "lease_seconds", "created_at", "dedupe_key", "dedupe_until", "trace_id", "backoff_base",
    "backoff_cap", "expires_at", "owner", "public", "jitter", "non_retryable", "soft_timeout",
    "limit_key", "limit_name", "workflow_node", "workflow_position",
    # Changed now and then: a replay's edits, a handback, a dedupe window's end, a limit, a
    # cancel request, progress, a failed attempt, a retry's time.
    "edits", "handbacks", "dedupe_lapsed", "limit_reserved", "limit_wait", "cancel_requested_at",
    "progress", "errors", "last_error", "run_at",
    # The outcome's own, then what the claim and the outcome both change (the start mark and
    # the heartbeat change started_attempt and the lease), then the claim's own.
    "result", "finished_at", "started_attempt", "state", "worker_id", "lease_expires_at",
    "attempt", "worker_ids", "started_at", "last_attempted_at",
)  # fmt: skip

FILLFACTOR = 50
PREVIOUS_FILLFACTOR = 70

# Copies jobs_job into a table with the columns in the order wanted, and puts it in its
# place with everything the old one had: the columns' types, NOT NULL and defaults; the
# constraints, the indexes that back none, the triggers (by their own definitions, so with
# their names); the storage options (the fillfactor set here, once the rows are copied); the
# privileges. Refuses a table whose columns are not exactly those named.
REWRITE = """
DO $rewrite$
DECLARE
    wanted text[] := ARRAY[%(order)s];
    missing text[];
    coldefs text;
    collist text;
    ddl text[];
    options text[];
    stmt text;
BEGIN
    LOCK TABLE jobs_job IN ACCESS EXCLUSIVE MODE;
    SELECT array_agg(name) INTO missing FROM (
        (SELECT a.attname::text AS name FROM pg_attribute a
         WHERE a.attrelid = 'jobs_job'::regclass AND a.attnum > 0 AND NOT a.attisdropped
         EXCEPT SELECT unnest(wanted))
        UNION ALL
        (SELECT unnest(wanted) EXCEPT SELECT a.attname::text FROM pg_attribute a
         WHERE a.attrelid = 'jobs_job'::regclass AND a.attnum > 0 AND NOT a.attisdropped)
    ) differ;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'jobs_job has other columns than the order names: %%', missing;
    END IF;
    SELECT string_agg(format('%%I %%s%%s%%s%%s', a.attname, format_type(a.atttypid, a.atttypmod),
                             CASE WHEN a.attcollation <> t.typcollation
                                  THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END,
                             CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                             coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')),
                      ', ' ORDER BY array_position(wanted, a.attname::text)),
           string_agg(format('%%I', a.attname), ', ' ORDER BY array_position(wanted, a.attname::text))
    INTO coldefs, collist
    FROM pg_attribute a
    JOIN pg_type t ON t.oid = a.atttypid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = 'jobs_job'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    SELECT array_agg(o) INTO options
    FROM pg_class c, unnest(c.reloptions) o
    WHERE c.oid = 'jobs_job'::regclass AND o NOT LIKE 'fillfactor=%%';
    SELECT array_agg(s ORDER BY k, n) INTO ddl FROM (
        SELECT 1 AS k, conname::text AS n,
               format('ALTER TABLE jobs_job ADD CONSTRAINT %%I %%s', conname, pg_get_constraintdef(oid)) AS s
        FROM pg_constraint
        WHERE conrelid = 'jobs_job'::regclass AND contype IN ('p', 'u', 'c', 'x', 'f')
        UNION ALL
        SELECT 2, c.relname::text, pg_get_indexdef(i.indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'jobs_job'::regclass
          AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid
                                                          AND k.conrelid = 'jobs_job'::regclass)
        UNION ALL
        SELECT 3, tgname::text, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE tgrelid = 'jobs_job'::regclass AND NOT tgisinternal
        UNION ALL
        SELECT 4, '', format('GRANT %%s ON jobs_job TO %%s', p.privilege_type,
                             CASE WHEN p.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(p.grantee)) END)
        FROM pg_class c, aclexplode(c.relacl) p
        WHERE c.oid = 'jobs_job'::regclass AND p.grantee <> c.relowner
    ) q;
    -- The rows copied fill whole pages: most are finished and will not change again. The
    -- fillfactor applies to the rows inserted from now on.
    EXECUTE format('CREATE TABLE jobs_job_reordered (%%s)', coldefs);
    EXECUTE format('INSERT INTO jobs_job_reordered (%%1$s) SELECT %%1$s FROM jobs_job', collist);
    DROP TABLE jobs_job;
    ALTER TABLE jobs_job_reordered RENAME TO jobs_job;
    EXECUTE format('ALTER TABLE jobs_job SET (%%s)',
                   array_to_string(coalesce(options, '{}') || 'fillfactor=%(fillfactor)s'::text, ', '));
    FOREACH stmt IN ARRAY coalesce(ddl, '{}') LOOP
        EXECUTE stmt;
    END LOOP;
END
$rewrite$
"""


def rewrite_sql(order: tuple[str, ...], fillfactor: int) -> list[str]:
    """The statements that rewrite jobs_job with its columns in ``order``, its pages filled
    to ``fillfactor`` percent, then analyse it (the layout prototype uses them too)."""
    assert all(re.fullmatch(r"[a-z_]+", name) for name in order) and 10 <= fillfactor <= 100
    names = ", ".join(f"'{name}'" for name in order)
    return [REWRITE % {"order": names, "fillfactor": int(fillfactor)}, "ANALYZE jobs_job"]


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0020_lease_index_by_holder"),
    ]

    operations = [
        migrations.RunSQL(
            rewrite_sql(ORDER, FILLFACTOR),
            reverse_sql=rewrite_sql(PREVIOUS_ORDER, PREVIOUS_FILLFACTOR),
        ),
    ]
