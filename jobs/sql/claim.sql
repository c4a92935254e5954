-- Claim due jobs for one executor process, in one statement.
--
-- Each queue is asked for at most its quota (the worker splits its capacity between its
-- queues by weight, jobs/worker/fairness.py), in the order given; within a queue, higher
-- priority first, then oldest run_at, then oldest id (ids are time-ordered, so jobs
-- enqueued together start in the order they were enqueued). The LATERAL sub-select walks
-- the partial index jobs_job_claimable (state = 'queued', due rows only: future ones are
-- 'scheduled') and stops after the quota; SKIP LOCKED lets concurrent claimers pass each
-- other without waiting, and the outer LIMIT stops visiting queues once the batch is full.
--
-- The attempt is counted here, so a job that kills its worker still uses one up; whether
-- it began is marked separately (started_attempt), so a lost worker's unstarted jobs go
-- back unused. Jobs whose task sets no lease or time limit get the worker's. A job whose
-- not-started deadline (expires_at) has passed is not started: it ends expired, using no
-- attempt.
--
-- Jobs under a rate or concurrency limit (jobs/limits.py) are decided here too, under the
-- lock of their key's state row, so every worker sees one budget:
--   * concurrency: at most `concurrency - running` of a key start; the others wait as
--     'scheduled' (limit_wait 'concurrency') until a running job of the key finishes (a
--     trigger wakes the next one, migration 0010_limits), re-checked within a minute anyway;
--   * rate (GCRA on the starts themselves, `tat`): after an idle spell burst + 1 start at
--     once, then one per 1/rate, so over any second at most rate + burst start; the jobs
--     that cannot start yet wait as 'scheduled' with a start time set aside for them
--     (limit_reserved), consecutive times from `next_slot`, so a waiting job comes back
--     once, when it may start, and no worker spins on it. New jobs queue behind them.
-- A waiting job uses no attempt and keeps its priority. Keys whose state row another
-- claim holds this moment are left queued for the next claim.
--
-- A paused queue (a row in jobs_paused_queue, set from the console) is left out: its jobs
-- stay queued, in place, until it is resumed.
WITH candidates AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at, c.limit_name, c.limit_key, c.limit_reserved,
           coalesce(c.expires_at <= coalesce(%(now)s, statement_timestamp()), false) AS expired
    FROM unnest(%(queues)s::text[], %(quotas)s::int[]) WITH ORDINALITY AS q(name, quota, ord)
    CROSS JOIN LATERAL (
        SELECT j.id, j.expires_at, j.priority, j.run_at, j.limit_name, j.limit_key, j.limit_reserved
        FROM jobs_job j
        WHERE j.state = 'queued'
          AND j.queue_name = q.name
          AND j.run_at <= coalesce(%(now)s, statement_timestamp())
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT q.quota
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE NOT EXISTS (SELECT 1 FROM jobs_paused_queue p WHERE p.name = q.name)
    LIMIT %(limit)s
), states AS MATERIALIZED (
    SELECT s.id AS state_id, s.limit_name, s.limit_key, s.tat, s.next_slot, s.running,
           l.rate, l.burst, l.concurrency,
           greatest(s.tat, coalesce(%(now)s, statement_timestamp())) AS base
    FROM jobs_limit_state s
    JOIN jobs_limit l ON l.name = s.limit_name
    WHERE (s.limit_name, s.limit_key) IN (
        SELECT limit_name, limit_key FROM candidates WHERE limit_name IS NOT NULL AND NOT expired)
    FOR UPDATE OF s SKIP LOCKED
), placed AS (
    -- Each limited job's place in its key's line: jobs returning at a start time set aside
    -- for them first (in that order), then the others by priority and age.
    SELECT c.id, s.state_id, c.limit_reserved AS reserved, s.base, s.next_slot, s.running, s.rate,
           s.burst, s.concurrency,
           row_number() OVER (PARTITION BY s.state_id
                              ORDER BY c.limit_reserved DESC,
                                       CASE WHEN c.limit_reserved THEN c.run_at END,
                                       c.priority DESC, c.run_at, c.id) AS place
    FROM candidates c
    JOIN states s ON s.limit_name = c.limit_name AND s.limit_key = c.limit_key
    WHERE NOT c.expired
), eligible AS (
    -- A free slot under the concurrency limit; and, under a rate, either a start time set
    -- aside for it, or nobody waiting with one (else it would jump the line).
    SELECT p.*,
           (p.concurrency IS NULL OR p.place <= p.concurrency - p.running) AS has_slot,
           (p.concurrency IS NULL OR p.place <= p.concurrency - p.running)
           AND (p.rate IS NULL OR p.reserved OR p.next_slot <= coalesce(%(now)s, statement_timestamp()))
               AS may_start,
           -- GCRA: how many may start now (burst + 1 after an idle spell, then one per 1/rate).
           CASE WHEN p.rate IS NULL THEN NULL
                ELSE greatest(0, floor((extract(epoch FROM coalesce(%(now)s, statement_timestamp()) - p.base)
                                        * p.rate + p.burst))::int + 1)
           END AS allowance
    FROM placed p
), decided AS (
    SELECT e.*,
           CASE WHEN NOT e.has_slot THEN 'wait_concurrency'
                WHEN e.may_start
                     AND (e.allowance IS NULL
                          OR row_number() OVER (PARTITION BY e.state_id, e.may_start ORDER BY e.place)
                             <= e.allowance) THEN 'start'
                ELSE 'wait_rate'
           END AS decision
    FROM eligible e
), timed AS (
    -- Jobs kept waiting by the rate get consecutive start times 1/rate apart, from the
    -- first one not yet set aside (and not before the rate allows the next start).
    SELECT d.*,
           count(*) FILTER (WHERE d.decision = 'start') OVER (PARTITION BY d.state_id) AS started,
           CASE WHEN d.decision = 'wait_rate'
                THEN row_number() OVER (PARTITION BY d.state_id, d.decision ORDER BY d.place) - 1
           END AS turn
    FROM decided d
), planned AS (
    SELECT t.*,
           CASE WHEN t.decision = 'wait_rate'
                THEN greatest(t.next_slot,
                              t.base + (t.started - t.burst) / t.rate * interval '1 second')
                     + t.turn / t.rate * interval '1 second'
           END AS start_at
    FROM timed t
), budgets AS (
    UPDATE jobs_limit_state s
    SET running = s.running + b.started,
        tat = CASE WHEN b.rate IS NOT NULL AND b.started > 0
                   THEN b.base + b.started / b.rate * interval '1 second' ELSE s.tat END,
        next_slot = CASE WHEN b.last_start IS NOT NULL
                         THEN greatest(s.next_slot, b.last_start + interval '1 second' / b.rate)
                         ELSE s.next_slot END
    FROM (SELECT state_id, max(started) AS started, max(rate) AS rate, max(base) AS base,
                 max(start_at) AS last_start
          FROM planned GROUP BY state_id) b
    WHERE s.id = b.state_id
), outcomes AS (
    SELECT c.id, d.start_at,
           CASE WHEN c.expired THEN 'expire'
                WHEN c.limit_name IS NULL
                     OR NOT EXISTS (SELECT 1 FROM jobs_limit l WHERE l.name = c.limit_name) THEN 'start'
                ELSE coalesce(d.decision, 'skip')
           END AS decision
    FROM candidates c
    LEFT JOIN planned d ON d.id = c.id
)
UPDATE jobs_job j
SET state = CASE o.decision WHEN 'start' THEN 'running' WHEN 'expire' THEN 'expired' ELSE 'scheduled' END,
    attempt = CASE WHEN o.decision = 'start' THEN j.attempt + 1 ELSE j.attempt END,
    worker_id = CASE WHEN o.decision = 'start' THEN %(worker)s::uuid END,
    worker_ids = CASE WHEN o.decision = 'start' THEN array_append(j.worker_ids, %(worker)s::uuid)
                      ELSE j.worker_ids END,
    lease_expires_at = CASE WHEN o.decision = 'start'
                            THEN coalesce(%(now)s, statement_timestamp())
                                 + coalesce(j.lease_seconds, %(lease_seconds)s) * interval '1 second'
                       END,
    started_at = CASE WHEN o.decision = 'start'
                      THEN coalesce(j.started_at, coalesce(%(now)s, statement_timestamp()))
                      ELSE j.started_at END,
    last_attempted_at = CASE WHEN o.decision = 'start' THEN coalesce(%(now)s, statement_timestamp())
                             ELSE j.last_attempted_at END,
    finished_at = CASE WHEN o.decision = 'expire' THEN coalesce(%(now)s, statement_timestamp()) END,
    last_error = CASE WHEN o.decision = 'expire' THEN 'expired: not started before ' || j.expires_at::text
                      ELSE j.last_error END,
    run_at = CASE o.decision
                 WHEN 'wait_rate' THEN o.start_at
                 WHEN 'wait_concurrency' THEN coalesce(%(now)s, statement_timestamp()) + interval '1 minute'
                 ELSE j.run_at END,
    limit_reserved = CASE o.decision WHEN 'wait_rate' THEN true WHEN 'start' THEN false
                          ELSE j.limit_reserved END,
    limit_wait = CASE o.decision WHEN 'wait_rate' THEN 'rate' WHEN 'wait_concurrency' THEN 'concurrency'
                      ELSE '' END
FROM outcomes o
WHERE j.id = o.id AND o.decision <> 'skip'
RETURNING j.id, j.task_path, j.args, j.kwargs, j.attempt, j.max_attempts,
          coalesce(j.timeout, %(default_timeout)s::float8),
          coalesce(j.lease_seconds, %(lease_seconds)s), j.trace_id, j.queue_name, j.priority,
          j.run_at, o.decision = 'expire', j.handbacks, j.soft_timeout, j.jitter, j.backoff_base,
          j.backoff_cap, j.non_retryable, j.created_at, o.decision
