-- pgbench script: jobs/sql/insert_plain.sql as one enqueue outside a transaction runs it
-- (notify and checked true): the row, then the due check that decides the NOTIFY.
WITH ins AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, args, kwargs, max_attempts, trace_id)
    VALUES (gen_random_uuid(), 'lab.benchmark.noop', 'default', 0, '[]'::jsonb, '{}'::jsonb, 3,
            '')
    RETURNING queue_name, created_at
)
SELECT ins.created_at,
       CASE WHEN NOT jobs_queue_has_due(ins.queue_name) THEN pg_notify('jobs_queued', ins.queue_name) END
FROM ins;
