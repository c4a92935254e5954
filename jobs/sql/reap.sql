-- Take back jobs whose lease expired: their worker is gone (killed, machine lost, cut
-- off from the database). Any worker may run this; SKIP LOCKED keeps two reapers apart,
-- and the re-check in the outer WHERE keeps a job that completed meanwhile completed.
-- The attempt was counted at claim: with attempts left the job is queued again after
-- backoff (the task's, kept on the row, else the worker's), otherwise it goes to the
-- dead-letter state with reason "worker lost". The exponent is clamped as in
-- retry.backoff: 2^1024 overflows and would fail every reap.
WITH expired AS (
    SELECT id
    FROM jobs_job
    WHERE state = 'running' AND lease_expires_at < coalesce(%(now)s, now())
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs_job j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'dead' ELSE 'queued' END,
    run_at = coalesce(%(now)s, now())
             + least(coalesce(j.backoff_cap, %(cap)s),
                     coalesce(j.backoff_base, %(base)s)
                     * power(2, least(greatest(j.attempt - 1, 0), 62)))
               * (0.5 + random() * 0.5) * interval '1 second',
    finished_at = CASE WHEN j.attempt >= j.max_attempts
                       THEN coalesce(%(now)s, now()) END,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt,
        'at', coalesce(%(now)s, now()),
        'worker', j.worker_id,
        'exception', 'jobs.exceptions.WorkerLost',
        'message', 'worker lost: lease expired at ' || j.lease_expires_at::text,
        'traceback', '')),
    last_error = 'worker lost',
    worker_id = NULL,
    lease_expires_at = NULL
FROM expired e
WHERE j.id = e.id
  AND j.state = 'running'
  AND j.lease_expires_at < coalesce(%(now)s, now())
RETURNING j.id, j.state, j.task_path, j.attempt
