-- pgbench script: the job row alone, as jobs/sql/insert_plain.sql inserts a no-op job,
-- without the due check and the NOTIFY (the id is random here, time-ordered in the engine;
-- no trace of its own, as the engine stores it).
INSERT INTO jobs_job (id, task_path, queue_name, priority, args, kwargs, max_attempts, trace_id)
VALUES (gen_random_uuid(), 'lab.benchmark.noop', 'default', 0, '[]'::jsonb, '{}'::jsonb, 3,
        '');
