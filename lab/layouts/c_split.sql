-- Layout C, a hot/cold split of today's table: the columns the transitions write
-- move to a narrow table, jobs_job_run; the wide row (jobs_job: task, payload, options,
-- owner, trace, workflow place, and the result and errors, written only when there are
-- some) is written once at enqueue. Every index whose key or predicate names a mutable
-- column moves with them, and so do the console's count triggers.
-- name: schema
DROP INDEX jobs_job_claimable, jobs_job_holder, jobs_job_scheduled, jobs_job_limit_waiting,
    jobs_job_limit_key, jobs_job_console_state, jobs_job_console_retrying, jobs_job_dedupe;
DROP TRIGGER jobs_count_inserted ON jobs_job;
DROP TRIGGER jobs_count_updated ON jobs_job;
DROP TRIGGER jobs_count_deleted ON jobs_job;
DROP TRIGGER jobs_limit_left_running ON jobs_job;
DROP TRIGGER jobs_wf_job_finished ON jobs_job;

CREATE TABLE jobs_job_run (
    id uuid PRIMARY KEY,
    queue_name text NOT NULL,
    priority smallint NOT NULL DEFAULT 0,
    state text NOT NULL DEFAULT 'queued',
    run_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    attempt integer NOT NULL DEFAULT 0,
    started_attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    worker_id uuid,
    lease_expires_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    worker_ids uuid[] NOT NULL DEFAULT '{}',
    limit_name text,
    limit_key text NOT NULL DEFAULT '',
    limit_wait text NOT NULL DEFAULT '',
    dedupe_key text,
    dedupe_lapsed boolean NOT NULL DEFAULT false,
    task_path text NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX jobs_job_run_claimable ON jobs_job_run (queue_name, priority DESC, run_at, id)
    WHERE state = 'queued';
CREATE INDEX jobs_job_run_lease ON jobs_job_run (worker_id) WHERE state = 'running';
CREATE INDEX jobs_job_run_scheduled ON jobs_job_run (run_at)
    WHERE state = 'scheduled' AND limit_wait <> 'concurrency';
CREATE INDEX jobs_job_run_console_state ON jobs_job_run (state, id)
    WHERE state IN ('succeeded', 'dead', 'cancelled', 'expired');
CREATE INDEX jobs_job_run_retrying ON jobs_job_run (id)
    WHERE attempt > 0 AND state IN ('queued', 'scheduled');
CREATE INDEX jobs_job_run_limit_key ON jobs_job_run (limit_name, limit_key, state)
    WHERE limit_name IS NOT NULL AND state IN ('queued', 'running', 'scheduled', 'waiting');
CREATE UNIQUE INDEX jobs_job_run_dedupe ON jobs_job_run (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND NOT dedupe_lapsed AND state IN ('scheduled', 'queued', 'running');

-- Today's count triggers, on the narrow table (last_error is on the wide row: NULL here).
CREATE FUNCTION jobs_run_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_queue_count (queue_name, bucket, delta)
    SELECT queue_name,
           CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying' ELSE state END,
           count(*)
    FROM new_rows GROUP BY 1, 2;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_run_count_inserted AFTER INSERT ON jobs_job_run
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION jobs_run_count_inserted();
CREATE FUNCTION jobs_run_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        SELECT queue_name, task_path, bucket, sum(delta) AS delta
        FROM (SELECT queue_name, task_path,
                     CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying'
                          ELSE state END AS bucket, -1 AS delta
              FROM old_rows
              UNION ALL
              SELECT queue_name, task_path,
                     CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying'
                          ELSE state END, 1
              FROM new_rows) AS changes
        GROUP BY 1, 2, 3
        HAVING sum(delta) <> 0
    ), counted AS (
        INSERT INTO jobs_queue_count (queue_name, bucket, delta)
        SELECT queue_name, bucket, sum(delta) FROM moved GROUP BY 1, 2
    )
    INSERT INTO jobs_throughput (minute, queue_name, task_path, succeeded, failed, last_error, last_job_id)
    SELECT date_trunc('minute', statement_timestamp()), queue_name, task_path,
           coalesce(sum(delta) FILTER (WHERE bucket = 'succeeded'), 0),
           coalesce(sum(delta) FILTER (WHERE bucket <> 'succeeded'), 0), '', NULL
    FROM moved
    WHERE delta > 0 AND bucket IN ('succeeded', 'dead', 'retrying')
    GROUP BY queue_name, task_path;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_run_count_updated AFTER UPDATE ON jobs_job_run
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION jobs_run_count_updated();

CREATE FUNCTION jobs_run_has_due(queue text) RETURNS boolean LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobs_job_run j WHERE j.state = 'queued' AND j.queue_name = queue);
END $$;

-- name: enqueue
WITH body AS (
    INSERT INTO jobs_job (id, task_path, queue_name, priority, args, kwargs, max_attempts, trace_id)
    VALUES (%(id)s, %(task_path)s, %(queue_name)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
            %(max_attempts)s, %(trace_id)s)
), ins AS (
    INSERT INTO jobs_job_run (id, task_path, queue_name, priority, max_attempts)
    VALUES (%(id)s, %(task_path)s, %(queue_name)s, %(priority)s, %(max_attempts)s)
    RETURNING queue_name
)
SELECT pg_notify('jobs_queued', ins.queue_name)
FROM ins
WHERE %(notify)s AND NOT (%(checked)s AND jobs_run_has_due(ins.queue_name))

-- name: claim
WITH quick_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), candidates AS MATERIALIZED (
    SELECT c.id
    FROM quick_commit, unnest(%(queues)s::text[], %(quotas)s::int[]) AS q(name, quota)
    CROSS JOIN LATERAL (
        SELECT r.id FROM jobs_job_run r
        WHERE r.state = 'queued' AND r.queue_name = q.name
          AND r.run_at <= coalesce(%(now)s, statement_timestamp())
        ORDER BY r.priority DESC, r.run_at, r.id
        LIMIT q.quota
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT %(limit)s
), claimed AS (
    UPDATE jobs_job_run r
    SET state = 'running', attempt = r.attempt + 1, worker_id = %(worker)s::uuid,
        worker_ids = array_append(r.worker_ids, %(worker)s::uuid),
        lease_expires_at = coalesce(%(now)s, statement_timestamp())
                           + least(%(lease_seconds)s, %(unstarted_lease)s) * interval '1 second',
        started_at = coalesce(r.started_at, %(now)s, statement_timestamp())
    FROM candidates o
    WHERE r.id = o.id
    RETURNING r.id, r.attempt
)
SELECT c.id, j.task_path, j.args::text, j.kwargs::text, c.attempt, j.max_attempts, j.timeout,
       j.lease_seconds, j.trace_id, j.queue_name, j.priority
FROM claimed c JOIN jobs_job j ON j.id = c.id

-- name: heartbeat
UPDATE jobs_job_run r
SET lease_expires_at = coalesce(%(now)s, statement_timestamp()) + %(lease_seconds)s * interval '1 second'
FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS h(id, token)
WHERE r.id = h.id AND (r.state, r.worker_id) IS NOT DISTINCT FROM ('running', h.token)
RETURNING r.id

-- name: outcome
WITH recorded AS (
    UPDATE jobs_job_run r
    SET state = v.state, finished_at = coalesce(%(now)s, statement_timestamp()),
        started_attempt = r.attempt, worker_id = NULL, lease_expires_at = NULL
    FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS v(id uuid, attempt int, state text)
    WHERE r.id = v.id
      AND (r.state, r.worker_id, r.attempt) IS NOT DISTINCT FROM ('running', %(worker)s::uuid, v.attempt)
    RETURNING r.id
), body AS (
    -- Only outcomes that carry something: a result or an error.
    UPDATE jobs_job j
    SET result = v.result, errors = CASE WHEN v.error IS NULL THEN j.errors ELSE j.errors || v.error END,
        last_error = coalesce(v.error ->> 'message', j.last_error)
    FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS v(id uuid, result jsonb, error jsonb)
    WHERE j.id = v.id AND j.id IN (SELECT id FROM recorded)
      AND (v.result IS NOT NULL OR v.error IS NOT NULL)
)
SELECT id FROM recorded
