-- Insert one or many jobs in one statement, on the caller's connection and transaction.
--
-- A job due later than now is 'scheduled' (the claim does not see it until it is promoted);
-- one due now is 'queued'. "Now" is the statement's time, as for the table's defaults
-- (Django's Now()), so that jobs enqueued one after another in a transaction are due one
-- after another. Rows whose dedupe_key is held by an unfinished job are skipped
-- (ON CONFLICT on the partial unique index jobs_job_dedupe); the caller looks up the
-- holder. Workers are woken with one NOTIFY per queue that received a due job and had none
-- due before (see insert_one.sql): PostgreSQL delivers it when the transaction commits,
-- drops it on rollback, and folds duplicates within a transaction.
--
-- A job under a limit keeps its limit key only if the limit has a budget per key ('' for
-- a shared one), and its key gets a state row for the claim to lock (jobs/limits.py).
WITH ins AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs, run_at,
                          max_attempts, timeout, lease_seconds, backoff_base, backoff_cap,
                          jitter, soft_timeout, non_retryable, dedupe_key, dedupe_until,
                          trace_id, owner, public, expires_at, limit_name, limit_key)
    SELECT t.id, t.task_path, t.queue_name, t.priority,
           CASE WHEN t.run_at > coalesce(%(now)s, statement_timestamp()) THEN 'scheduled' ELSE 'queued' END,
           t.args::jsonb, t.kwargs::jsonb, coalesce(t.run_at, coalesce(%(now)s, statement_timestamp())),
           t.max_attempts, t.timeout, t.lease_seconds, t.backoff_base, t.backoff_cap,
           t.jitter, t.soft_timeout, string_to_array(t.non_retryable, ' '), t.dedupe_key,
           coalesce(%(now)s, statement_timestamp()) + t.dedupe_window * interval '1 second',
           t.trace_id, t.owner, t.public, t.expires_at, t.limit_name,
           CASE WHEN l.per_key THEN coalesce(t.limit_key, '') ELSE '' END
    FROM unnest(%(id)s::uuid[], %(task_path)s::text[], %(queue_name)s::text[],
                %(priority)s::smallint[], %(args)s::text[], %(kwargs)s::text[],
                %(run_at)s::timestamptz[], %(max_attempts)s::int[], %(timeout)s::float8[],
                %(lease_seconds)s::float8[], %(backoff_base)s::float8[],
                %(backoff_cap)s::float8[], %(jitter)s::bool[], %(soft_timeout)s::float8[],
                %(non_retryable)s::text[], %(dedupe_key)s::text[],
                %(dedupe_window)s::float8[], %(trace_id)s::text[], %(owner)s::text[],
                %(public)s::bool[], %(expires_at)s::timestamptz[], %(limit_name)s::text[],
                %(limit_key)s::text[]) WITH ORDINALITY
         AS t(id, task_path, queue_name, priority, args, kwargs, run_at, max_attempts,
              timeout, lease_seconds, backoff_base, backoff_cap, jitter, soft_timeout,
              non_retryable, dedupe_key, dedupe_window, trace_id, owner, public, expires_at,
              limit_name, limit_key, ord)
    LEFT JOIN jobs_limit l ON l.name = t.limit_name
    -- In the order given: of two rows with one dedupe key, the first is the one inserted.
    ORDER BY t.ord
    ON CONFLICT (dedupe_key)
        WHERE dedupe_key IS NOT NULL AND NOT dedupe_lapsed
              AND state IN ('scheduled', 'queued', 'running')
        DO NOTHING
    RETURNING id, queue_name, state, limit_name, limit_key, created_at
), keys AS (
    INSERT INTO jobs_limit_state (limit_name, limit_key)
    SELECT DISTINCT limit_name, limit_key FROM ins WHERE limit_name IS NOT NULL
    ON CONFLICT (limit_name, limit_key) DO NOTHING
), woken AS (
    SELECT pg_notify('jobs_queued', d.queue_name)
    FROM (SELECT DISTINCT queue_name FROM ins WHERE %(notify)s AND state = 'queued') AS d
    -- (The wake-up check of insert_one.sql.)
    WHERE NOT (%(checked)s AND jobs_queue_has_due(d.queue_name))
)
SELECT ins.id, ins.created_at FROM ins, (SELECT count(*) FROM woken) AS w
