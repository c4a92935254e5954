-- Layout D, narrow execution tables in the manner of Solid Queue, beside today's table: a
-- due job has a row in jobs_job_ready, deleted by the claim, which inserts
-- the job's row in jobs_job_claimed (claim token, attempt, lease); the outcome deletes that
-- row and writes the wide job row once, with its final state. The wide row keeps today's
-- console indexes and count triggers; it is not written at claim.
-- name: schema
DROP INDEX jobs_job_claimable, jobs_job_holder;
CREATE TABLE jobs_job_ready (
    job_id uuid PRIMARY KEY,
    queue_name text NOT NULL,
    priority smallint NOT NULL,
    run_at timestamptz NOT NULL
);
CREATE INDEX jobs_job_ready_claim ON jobs_job_ready (queue_name, priority DESC, run_at, job_id);
CREATE TABLE jobs_job_claimed (
    job_id uuid PRIMARY KEY,
    worker_id uuid NOT NULL,
    attempt integer NOT NULL,
    claimed_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX jobs_job_claimed_worker ON jobs_job_claimed (worker_id);
CREATE FUNCTION jobs_ready_has_due(queue text) RETURNS boolean LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobs_job_ready r WHERE r.queue_name = queue);
END $$;

-- name: enqueue
WITH ins AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, args, kwargs, max_attempts, trace_id)
    VALUES (%(id)s, %(task_path)s, %(queue_name)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
            %(max_attempts)s, %(trace_id)s)
    RETURNING id, queue_name, priority, run_at
), ready AS (
    INSERT INTO jobs_job_ready (job_id, queue_name, priority, run_at)
    SELECT id, queue_name, priority, run_at FROM ins
)
SELECT pg_notify('jobs_queued', ins.queue_name)
FROM ins
WHERE %(notify)s AND NOT (%(checked)s AND jobs_ready_has_due(ins.queue_name))

-- name: claim
WITH quick_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), candidates AS MATERIALIZED (
    SELECT c.job_id
    FROM quick_commit, unnest(%(queues)s::text[], %(quotas)s::int[]) AS q(name, quota)
    CROSS JOIN LATERAL (
        SELECT r.job_id FROM jobs_job_ready r
        WHERE r.queue_name = q.name AND r.run_at <= coalesce(%(now)s, statement_timestamp())
        ORDER BY r.priority DESC, r.run_at, r.job_id
        LIMIT q.quota
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT %(limit)s
), taken AS (
    DELETE FROM jobs_job_ready r USING candidates c WHERE r.job_id = c.job_id RETURNING r.job_id
), claimed AS (
    INSERT INTO jobs_job_claimed (job_id, worker_id, attempt, claimed_at, lease_expires_at)
    SELECT j.id, %(worker)s::uuid, j.attempt + 1, coalesce(%(now)s, statement_timestamp()),
           coalesce(%(now)s, statement_timestamp())
           + least(coalesce(j.lease_seconds, %(lease_seconds)s), %(unstarted_lease)s) * interval '1 second'
    FROM taken t JOIN jobs_job j ON j.id = t.job_id
    RETURNING job_id, attempt
)
SELECT c.job_id, j.task_path, j.args::text, j.kwargs::text, c.attempt, j.max_attempts, j.timeout,
       j.lease_seconds, j.trace_id, j.queue_name, j.priority
FROM claimed c JOIN jobs_job j ON j.id = c.job_id

-- name: heartbeat
UPDATE jobs_job_claimed c
SET lease_expires_at = coalesce(%(now)s, statement_timestamp()) + %(lease_seconds)s * interval '1 second'
FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS h(id, token)
WHERE c.job_id = h.id AND c.worker_id = h.token
RETURNING c.job_id

-- name: outcome
WITH v AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS v(id uuid, attempt int, state text, result jsonb)
), done AS (
    DELETE FROM jobs_job_claimed c USING v
    WHERE c.job_id = v.id AND c.worker_id = %(worker)s::uuid AND c.attempt = v.attempt
    RETURNING c.job_id, c.attempt, c.claimed_at
), recorded AS (
    UPDATE jobs_job j
    SET state = v.state, attempt = d.attempt, started_attempt = d.attempt,
        worker_ids = array_append(j.worker_ids, %(worker)s::uuid),
        started_at = coalesce(j.started_at, d.claimed_at), last_attempted_at = d.claimed_at,
        finished_at = coalesce(%(now)s, statement_timestamp()), result = v.result
    FROM done d JOIN v ON v.id = d.job_id
    WHERE j.id = d.job_id
    RETURNING j.id
)
SELECT id FROM recorded
