-- Claim up to %(limit)s due jobs for one worker process, in one statement.
--
-- Queues are visited in the order given (a weighted-random or strict order chosen by the
-- worker); within a queue, higher priority first, then oldest run_at. The LATERAL
-- sub-select walks the partial index jobs_job_claimable (state = 'queued') and stops after
-- %(limit)s rows; SKIP LOCKED lets concurrent claimers pass each other without waiting.
-- The attempt is counted here, so a job that kills its worker still uses one up. Jobs
-- whose task sets no lease or time limit get the worker's.
WITH candidates AS (
    SELECT c.id
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM jobs_job j
        WHERE j.state = 'queued'
          AND j.queue_name = q.name
          AND j.run_at <= coalesce(%(now)s, now())
        ORDER BY j.priority DESC, j.run_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT %(limit)s
)
UPDATE jobs_job j
SET state = 'running',
    attempt = j.attempt + 1,
    worker_id = %(worker)s,
    worker_ids = array_append(j.worker_ids, %(worker)s::uuid),
    lease_expires_at = coalesce(%(now)s, now())
                       + coalesce(j.lease_seconds, %(lease_seconds)s) * interval '1 second',
    started_at = coalesce(j.started_at, coalesce(%(now)s, now())),
    last_attempted_at = coalesce(%(now)s, now())
FROM candidates c
WHERE j.id = c.id
RETURNING j.id, j.task_path, j.args, j.kwargs, j.attempt, j.max_attempts,
          coalesce(j.timeout, %(default_timeout)s::float8),
          coalesce(j.lease_seconds, %(lease_seconds)s), j.trace_id, j.queue_name, j.priority
