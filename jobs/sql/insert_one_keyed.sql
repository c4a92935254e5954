-- insert.sql for exactly one row with a dedupe key: the same semantics, a cheaper plan.
WITH ins AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs, run_at,
                          max_attempts, timeout, lease_seconds, backoff_base, backoff_cap,
                          jitter, soft_timeout, non_retryable, dedupe_key, dedupe_until,
                          trace_id, owner, public, expires_at)
    VALUES (%(id)s, %(task_path)s, %(queue_name)s, %(priority)s,
            CASE WHEN %(run_at)s::timestamptz > coalesce(%(now)s::timestamptz, statement_timestamp())
                 THEN 'scheduled' ELSE 'queued' END,
            %(args)s::jsonb, %(kwargs)s::jsonb,
            coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, statement_timestamp()),
            %(max_attempts)s, %(timeout)s::float8, %(lease_seconds)s::float8,
            %(backoff_base)s::float8, %(backoff_cap)s::float8, %(jitter)s::bool,
            %(soft_timeout)s::float8, %(non_retryable)s::text[], %(dedupe_key)s::text,
            coalesce(%(now)s::timestamptz, statement_timestamp())
                + %(dedupe_window)s::float8 * interval '1 second',
            %(trace_id)s, %(owner)s, %(public)s, %(expires_at)s::timestamptz)
    ON CONFLICT (dedupe_key)
        WHERE dedupe_key IS NOT NULL AND NOT dedupe_lapsed
              AND state IN ('scheduled', 'queued', 'running')
        DO NOTHING
    RETURNING id, queue_name, state, created_at
)
SELECT ins.id, ins.created_at,
       CASE WHEN %(notify)s AND ins.state = 'queued'
                 AND NOT (%(checked)s AND jobs_queue_has_due(ins.queue_name))
            THEN pg_notify('jobs_queued', ins.queue_name) END
FROM ins
