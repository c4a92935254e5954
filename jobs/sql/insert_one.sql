-- Insert one job without a dedupe key: the common call, kept as cheap as it can be (no
-- ON CONFLICT; it returns the row's created_at, the result's enqueued_at, and wakes).
--
-- Outside a transaction (checked: true), workers are woken only when the job's queue had no
-- due job before it: with due jobs waiting, every worker of the queue is busy or about to
-- claim again (it claims while claims return jobs), and a NOTIFY would only add work to this
-- commit and wake listeners for nothing. Inside the caller's transaction the check would be
-- stale by its commit, which can come long after (the due job it saw claimed and finished,
-- the workers asleep until their poll): there the wake-up is always sent, once per queue and
-- transaction (PostgreSQL folds equal notifications of one transaction).
--
-- The check, jobs_queue_has_due (sql/functions/), reads the queue as it was before this
-- statement (the row the INSERT adds is not visible to it) and walks jobs_job_claimable for
-- one entry whatever the statistics say. Planned here, it became a scan of the whole table
-- on one analysed while empty (just after a TRUNCATE, or a VACUUM that emptied it), kept by
-- the prepared statement until the next ANALYZE; a plain NOT EXISTS, while the statistics
-- still counted a drained backlog as queued.
WITH ins AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, state, args, kwargs, run_at,
                          max_attempts, timeout, lease_seconds, backoff_base, backoff_cap,
                          jitter, soft_timeout, non_retryable, trace_id, owner, public,
                          expires_at)
    VALUES (%(id)s, %(task_path)s, %(queue_name)s, %(priority)s,
            CASE WHEN %(run_at)s::timestamptz > coalesce(%(now)s::timestamptz, statement_timestamp())
                 THEN 'scheduled' ELSE 'queued' END,
            %(args)s::jsonb, %(kwargs)s::jsonb,
            coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, statement_timestamp()),
            %(max_attempts)s, %(timeout)s::float8, %(lease_seconds)s::float8,
            %(backoff_base)s::float8, %(backoff_cap)s::float8, %(jitter)s::bool,
            %(soft_timeout)s::float8, %(non_retryable)s::text[], %(trace_id)s, %(owner)s,
            %(public)s, %(expires_at)s::timestamptz)
    RETURNING queue_name, state, created_at
)
SELECT ins.created_at,
       CASE WHEN %(notify)s AND ins.state = 'queued'
                 AND NOT (%(checked)s AND jobs_queue_has_due(ins.queue_name))
            THEN pg_notify('jobs_queued', ins.queue_name) END
FROM ins
