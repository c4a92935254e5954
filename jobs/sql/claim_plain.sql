-- claim.sql for a database where no rate or concurrency limit is declared (jobs_limit is
-- empty; the worker checks every few seconds, jobs/worker/feeder.py): the same candidates in
-- the same order, under the same locks, paused queues left out, expired jobs ended, and
-- every other job started as claim.sql starts it, without the limits' planning (a third of
-- the statement's time for a small batch).
--
-- A limit declared since the worker last looked is still kept: a job whose limit exists is
-- passed over here (it stays queued, in place), and a last row with the decision 'limits'
-- (nothing else in it) tells the worker to claim with claim.sql from now on, at once.
-- It commits as claim.sql does, without waiting for the disk.
WITH quick_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), candidates AS MATERIALIZED (
    SELECT c.id, coalesce(c.expires_at <= coalesce(%(now)s, statement_timestamp()), false) AS expired
    FROM quick_commit, unnest(%(queues)s::text[], %(quotas)s::int[]) WITH ORDINALITY AS q(name, quota, ord)
    CROSS JOIN LATERAL (
        SELECT j.id, j.expires_at
        FROM jobs_job j
        WHERE j.state = 'queued'
          AND j.queue_name = q.name
          AND j.run_at <= coalesce(%(now)s, statement_timestamp())
          AND (j.limit_name IS NULL OR NOT EXISTS (SELECT 1 FROM jobs_limit l WHERE l.name = j.limit_name))
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT q.quota
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE NOT EXISTS (SELECT 1 FROM jobs_paused_queue p WHERE p.name = q.name)
    LIMIT %(limit)s
), claimed AS (
    UPDATE jobs_job j
    SET state = CASE WHEN o.expired THEN 'expired' ELSE 'running' END,
        attempt = CASE WHEN o.expired THEN j.attempt ELSE j.attempt + 1 END,
        worker_id = CASE WHEN NOT o.expired THEN %(worker)s::uuid END,
        worker_ids = CASE WHEN o.expired THEN j.worker_ids ELSE array_append(j.worker_ids, %(worker)s::uuid) END,
        lease_expires_at = CASE WHEN NOT o.expired
                                THEN coalesce(%(now)s, statement_timestamp())
                                     + least(coalesce(j.lease_seconds, %(lease_seconds)s), %(unstarted_lease)s)
                                       * interval '1 second'
                           END,
        started_at = CASE WHEN o.expired THEN j.started_at
                          ELSE coalesce(j.started_at, %(now)s, statement_timestamp()) END,
        last_attempted_at = CASE WHEN o.expired THEN j.last_attempted_at
                                 ELSE coalesce(%(now)s, statement_timestamp()) END,
        finished_at = CASE WHEN o.expired THEN coalesce(%(now)s, statement_timestamp()) END,
        last_error = CASE WHEN o.expired THEN 'expired: not started before ' || j.expires_at::text
                          ELSE j.last_error END,
        limit_reserved = CASE WHEN o.expired THEN j.limit_reserved ELSE false END,
        limit_wait = ''
    FROM candidates o
    WHERE j.id = o.id
    RETURNING j.id, j.task_path, j.args::text, j.kwargs::text, j.attempt, j.max_attempts,
              coalesce(j.timeout, %(default_timeout)s::float8),
              coalesce(j.lease_seconds, %(lease_seconds)s),
              coalesce(nullif(j.trace_id, ''), encode(uuid_send(j.id), 'hex')), j.queue_name, j.priority,
              j.run_at, o.expired, j.handbacks, j.soft_timeout, j.jitter, j.backoff_base,
              j.backoff_cap, j.non_retryable, j.created_at,
              CASE WHEN o.expired THEN 'expire' ELSE 'start' END AS decision,
              NULL::float8,
              extract(epoch FROM coalesce(%(now)s, statement_timestamp()) - j.run_at)::float8,
              j.workflow_node IS NOT NULL,
              nullif(j.started_at, j.last_attempted_at)
)
SELECT * FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, 'limits', NULL, NULL, NULL, NULL
WHERE EXISTS (SELECT 1 FROM jobs_limit)
