-- Claim due jobs for one executor process, in one statement.
--
-- Each queue is asked for at most its quota (the worker splits its capacity between its
-- queues by weight, jobs/worker/fairness.py), in the order given; within a queue, higher
-- priority first, then oldest run_at, then oldest id (ids are time-ordered, so jobs
-- enqueued together start in the order they were enqueued). The LATERAL sub-select walks the partial index
-- jobs_job_claimable (state = 'queued', due rows only: future ones are 'scheduled') and
-- stops after the quota; SKIP LOCKED lets concurrent claimers pass each other without
-- waiting, and the outer LIMIT stops visiting queues once the batch is full.
--
-- The attempt is counted here, so a job that kills its worker still uses one up; whether
-- it began is marked separately (started_attempt), so a lost worker's unstarted jobs go
-- back unused. Jobs whose task sets no lease or time limit get the worker's. A job whose
-- not-started deadline (expires_at) has passed is not started: it ends expired, using no
-- attempt.
WITH candidates AS (
    SELECT c.id, coalesce(c.expires_at <= coalesce(%(now)s, statement_timestamp()), false) AS expired
    FROM unnest(%(queues)s::text[], %(quotas)s::int[]) WITH ORDINALITY AS q(name, quota, ord)
    CROSS JOIN LATERAL (
        SELECT j.id, j.expires_at
        FROM jobs_job j
        WHERE j.state = 'queued'
          AND j.queue_name = q.name
          AND j.run_at <= coalesce(%(now)s, statement_timestamp())
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT q.quota
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT %(limit)s
)
UPDATE jobs_job j
SET state = CASE WHEN c.expired THEN 'expired' ELSE 'running' END,
    attempt = CASE WHEN c.expired THEN j.attempt ELSE j.attempt + 1 END,
    worker_id = CASE WHEN c.expired THEN NULL ELSE %(worker)s::uuid END,
    worker_ids = CASE WHEN c.expired THEN j.worker_ids
                      ELSE array_append(j.worker_ids, %(worker)s::uuid) END,
    lease_expires_at = CASE WHEN c.expired THEN NULL
                            ELSE coalesce(%(now)s, statement_timestamp())
                                 + coalesce(j.lease_seconds, %(lease_seconds)s) * interval '1 second'
                       END,
    started_at = CASE WHEN c.expired THEN j.started_at
                      ELSE coalesce(j.started_at, coalesce(%(now)s, statement_timestamp())) END,
    last_attempted_at = CASE WHEN c.expired THEN j.last_attempted_at ELSE coalesce(%(now)s, statement_timestamp()) END,
    finished_at = CASE WHEN c.expired THEN coalesce(%(now)s, statement_timestamp()) END,
    last_error = CASE WHEN c.expired THEN 'expired: not started before ' || j.expires_at::text
                      ELSE j.last_error END
FROM candidates c
WHERE j.id = c.id
RETURNING j.id, j.task_path, j.args, j.kwargs, j.attempt, j.max_attempts,
          coalesce(j.timeout, %(default_timeout)s::float8),
          coalesce(j.lease_seconds, %(lease_seconds)s), j.trace_id, j.queue_name, j.priority,
          j.run_at, c.expired, j.handbacks, j.soft_timeout, j.jitter, j.backoff_base,
          j.backoff_cap, j.non_retryable, j.created_at
