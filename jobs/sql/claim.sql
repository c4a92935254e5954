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
-- back unused. Jobs whose task sets no lease or time limit get the worker's; until the
-- attempt starts the lease is short (unstarted_lease, jobs/store/claims.py), so the jobs a
-- dead worker had prefetched come back within seconds. A job whose not-started deadline
-- (expires_at) has passed is not started: it ends expired, using no attempt.
--
-- Jobs under a rate or concurrency limit (jobs/limits.py) are decided here too, under the
-- lock of their key's state row, so every worker sees one budget:
--   * concurrency: at most `concurrency - running` of a key start. A key left with no slot
--     has all its queued jobs parked at once (the candidates and the rest of the key's
--     queue, `parked`): 'scheduled' with limit_wait 'concurrency', their due time kept and
--     no time at which they come back, so no claim reads them again until a running job
--     of the key finishes and its trigger wakes the next (sql/functions/jobs_limit_left_running.sql).
--     A key with slots left after this claim's starts (a woken job that expired here, a
--     raised limit) wakes as many parked jobs as it has slots (`woken`). Waiting work thus
--     never stands in the queue ahead of work that can run;
--   * rate (GCRA on the starts themselves, `tat`): after an idle spell burst + 1 start at
--     once, then one per 1/rate, so over any second at most rate + burst start. Each job
--     gets its start time here; one due within the next 100 ms is claimed with it (a column
--     of seconds to wait from the statement's start) and the worker starts it then, so no start time is lost to
--     the claim's own latency. The others wait as 'scheduled' with their start time set
--     aside (limit_reserved; consecutive times from `next_slot`) and come back 50 ms
--     before it, once, so no worker spins on them (the same column tells the worker when:
--     it promotes and claims then). New jobs queue behind them.
-- A waiting job uses no attempt and keeps its priority. Keys whose state row another
-- claim holds this moment are left queued for the next claim; so are jobs whose key has
-- no state row (the housekeeper drops the rows of keys no job names, and an enqueue may
-- commit a job of such a key just after): the row is made here (`missing`), for the next.
--
-- A paused queue (a row in jobs_paused_queue, set from the console) is left out: its jobs
-- stay queued, in place, until it is resumed.
--
-- The claim commits without waiting for its WAL to reach the disk (synchronous_commit off
-- for this statement's transaction alone): about 0.2 ms of every pickup here. Only a
-- crash of the database server itself can lose a claim so committed, and then the job is
-- queued again, as if that worker had died: it runs again (at least once, as always), its
-- attempt not counted. Nothing else waits on a claim's durability: the attempt's outcome,
-- its start mark and whatever the handler commits are written later with synchronous
-- commits, and flushing them flushes the claim before them.
WITH quick_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), candidates AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at, c.limit_name, c.limit_key, c.limit_reserved,
           coalesce(c.expires_at <= coalesce(%(now)s, statement_timestamp()), false) AS expired
    FROM quick_commit, unnest(%(queues)s::text[], %(quotas)s::int[]) WITH ORDINALITY AS q(name, quota, ord)
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
        SELECT limit_name, limit_key FROM candidates WHERE limit_name IS NOT NULL)
    FOR UPDATE OF s SKIP LOCKED
), missing AS (
    INSERT INTO jobs_limit_state (limit_name, limit_key)
    SELECT DISTINCT c.limit_name, c.limit_key
    FROM candidates c
    WHERE c.limit_name IS NOT NULL
      AND EXISTS (SELECT 1 FROM jobs_limit l WHERE l.name = c.limit_name)
      AND NOT EXISTS (SELECT 1 FROM jobs_limit_state s
                      WHERE s.limit_name = c.limit_name AND s.limit_key = c.limit_key)
    ON CONFLICT (limit_name, limit_key) DO NOTHING
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
    -- Under a rate, each job's start time: the i-th start of this claim conforms to GCRA at
    -- base + (i - 1 - burst) / rate; a job without a start time set aside also queues
    -- behind the ones that have one (from next_slot), so it cannot jump the line.
    SELECT p.*,
           (p.concurrency IS NULL OR p.place <= p.concurrency - p.running) AS has_slot,
           CASE WHEN p.rate IS NULL THEN NULL
                ELSE greatest(
                    coalesce(%(now)s, statement_timestamp()),
                    p.base + (p.place - 1 - p.burst) / p.rate * interval '1 second',
                    CASE WHEN NOT p.reserved
                         THEN p.next_slot + (p.place - 1 - count(*) FILTER (WHERE p.reserved)
                                                 OVER (PARTITION BY p.state_id)) / p.rate * interval '1 second'
                    END)
           END AS plan_at
    FROM placed p
), decided AS (
    -- Jobs whose start time falls within the next 100 ms start: the worker holds each
    -- until its time, so the starts keep the rate exactly and none is lost to the time a
    -- claim takes. The others wait for their time, less a lead (50 ms) for a promotion and
    -- a claim to hand them over before it comes.
    SELECT e.*,
           CASE WHEN NOT e.has_slot THEN 'wait_concurrency'
                WHEN e.plan_at IS NULL
                     OR e.plan_at < coalesce(%(now)s, statement_timestamp()) + interval '100 milliseconds'
                     THEN 'start'
                ELSE 'wait_rate'
           END AS decision
    FROM eligible e
), planned AS (
    SELECT d.*,
           count(*) FILTER (WHERE d.decision = 'start') OVER (PARTITION BY d.state_id) AS started,
           CASE WHEN d.decision = 'wait_rate' THEN d.plan_at - interval '50 milliseconds' END AS start_at
    FROM decided d
), budgets AS (
    -- GCRA's theoretical arrival time after this claim's starts (each at its plan_at), and
    -- the end of the line of jobs with a start time set aside.
    UPDATE jobs_limit_state s
    SET running = s.running + b.started,
        tat = CASE WHEN b.rate IS NOT NULL AND b.started > 0
                   THEN greatest(b.base + b.started / b.rate * interval '1 second', b.last_tat)
                   ELSE s.tat END,
        next_slot = CASE WHEN b.last_plan IS NOT NULL
                         THEN greatest(s.next_slot, b.last_plan + interval '1 second' / b.rate)
                         ELSE s.next_slot END
    FROM (SELECT state_id, max(started) AS started, max(rate) AS rate, max(base) AS base,
                 max(plan_at) FILTER (WHERE decision IN ('start', 'wait_rate')) AS last_plan,
                 max(plan_at + (started - place + 1) / rate * interval '1 second')
                     FILTER (WHERE decision = 'start') AS last_tat
          FROM planned GROUP BY state_id) b
    WHERE s.id = b.state_id
), slots_left AS MATERIALIZED (
    -- Each key under a concurrency limit decided here, with its slots left after this
    -- claim's starts (expired candidates' keys too: a woken job that expired passes its
    -- turn on).
    SELECT s.limit_name, s.limit_key,
           s.concurrency - s.running
               - coalesce((SELECT max(p.started) FROM planned p WHERE p.state_id = s.state_id), 0) AS free
    FROM states s
    WHERE s.concurrency IS NOT NULL
), parked AS (
    -- A full key's other queued jobs (not in this claim) park with the ones decided here:
    -- one set-based step, not a few per claim. Rows another claim holds are left to it
    -- (it cannot start them: the key's state row is ours) and parked by the next claim.
    -- (The ids as an array: joined instead, a key with thousands of jobs estimated makes
    -- the plan a hash join over the whole table.)
    UPDATE jobs_job j
    SET state = 'scheduled', limit_wait = 'concurrency'
    WHERE j.id = ANY (ARRAY(
        SELECT w.id
        FROM slots_left k
        JOIN jobs_job w ON w.limit_name = k.limit_name AND w.limit_key = k.limit_key
                       AND w.state = 'queued'
        WHERE k.free <= 0 AND NOT EXISTS (SELECT 1 FROM candidates c WHERE c.id = w.id)
        FOR UPDATE OF w SKIP LOCKED))
), woken AS (
    UPDATE jobs_job j
    SET state = 'queued', limit_wait = ''
    WHERE j.id = ANY (ARRAY(
        SELECT w.id
        FROM slots_left k
        CROSS JOIN LATERAL (
            SELECT p.id FROM jobs_job p
            WHERE p.state = 'scheduled' AND p.limit_wait = 'concurrency'
              AND p.limit_name = k.limit_name AND p.limit_key = k.limit_key
            ORDER BY p.priority DESC, p.id
            LIMIT greatest(k.free, 0)
            FOR UPDATE SKIP LOCKED) w
        WHERE k.free > 0))
    RETURNING pg_notify('jobs_queued', j.queue_name)
), outcomes AS (
    SELECT c.id, d.start_at, d.plan_at,
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
                                 + least(coalesce(j.lease_seconds, %(lease_seconds)s), %(unstarted_lease)s)
                                   * interval '1 second'
                       END,
    started_at = CASE WHEN o.decision = 'start'
                      THEN coalesce(j.started_at, o.plan_at, %(now)s, statement_timestamp())
                      ELSE j.started_at END,
    last_attempted_at = CASE WHEN o.decision = 'start'
                             THEN coalesce(o.plan_at, %(now)s, statement_timestamp())
                             ELSE j.last_attempted_at END,
    finished_at = CASE WHEN o.decision = 'expire' THEN coalesce(%(now)s, statement_timestamp()) END,
    last_error = CASE WHEN o.decision = 'expire' THEN 'expired: not started before ' || j.expires_at::text
                      ELSE j.last_error END,
    run_at = CASE o.decision
                 WHEN 'wait_rate' THEN o.start_at
                 ELSE j.run_at END,
    limit_reserved = CASE o.decision WHEN 'wait_rate' THEN true WHEN 'start' THEN false
                          ELSE j.limit_reserved END,
    limit_wait = CASE o.decision WHEN 'wait_rate' THEN 'rate' WHEN 'wait_concurrency' THEN 'concurrency'
                      ELSE '' END
FROM outcomes o
WHERE j.id = o.id AND o.decision <> 'skip'
RETURNING j.id, j.task_path, j.args::text, j.kwargs::text, j.attempt, j.max_attempts,
          coalesce(j.timeout, %(default_timeout)s::float8),
          coalesce(j.lease_seconds, %(lease_seconds)s),
          coalesce(nullif(j.trace_id, ''), encode(uuid_send(j.id), 'hex')), j.queue_name, j.priority,
          j.run_at, o.decision = 'expire', j.handbacks, j.soft_timeout, j.jitter, j.backoff_base,
          j.backoff_cap, j.non_retryable, j.created_at, o.decision,
          extract(epoch FROM CASE o.decision WHEN 'wait_rate' THEN o.start_at ELSE o.plan_at END
                             - coalesce(%(now)s, statement_timestamp()))::float8,
          extract(epoch FROM coalesce(%(now)s, statement_timestamp()) - j.run_at)::float8,
          j.workflow_node IS NOT NULL,
          nullif(j.started_at, j.last_attempted_at)
