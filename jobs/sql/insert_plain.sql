-- insert_one.sql for a job with no options of its own (no delay, no time limit, lease,
-- backoff, owner, deadline...): the columns' defaults stand for them, and fewer values
-- travel. Same wake-up rule.
WITH ins AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, args, kwargs, max_attempts, trace_id)
    VALUES (%(id)s, %(task_path)s, %(queue_name)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
            %(max_attempts)s, %(trace_id)s)
    RETURNING queue_name, created_at
)
SELECT ins.created_at,
       CASE WHEN %(notify)s AND NOT (%(checked)s AND jobs_queue_has_due(ins.queue_name))
            THEN pg_notify('jobs_queued', ins.queue_name) END
FROM ins
