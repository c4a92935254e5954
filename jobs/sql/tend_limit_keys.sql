-- The housekeeper's look at the limits' keys, by key (jobs_limit_state), never by walking
-- the jobs that wait:
--
-- * a safety net for wake-ups: a key under a concurrency limit with a slot free, jobs
--   parked on it and none of its jobs queued (no wake-up on its way) wakes as many parked
--   jobs as it has free slots. A release wakes the next job itself (the trigger
--   sql/functions/jobs_limit_left_running.sql) and the claim passes the turn of a woken job that
--   expired on; this catches what slips between, e.g. a woken job cancelled before it was
--   claimed. A key whose limit has no concurrency any more (lifted, or gone) wakes its
--   parked jobs, up to a batch a look.
-- * the clean-up: the state rows of keys no unfinished job names, nothing runs under and
--   whose rate budget is whole again (its GCRA time, `tat`, and the end of its line of set
--   aside starts, `next_slot`, passed: a new row, made at the next enqueue, starts the
--   same) go; per-key limits make one per user, tenant, ... An enqueue that commits a job
--   of such a key just after is safe: the claim makes the row again (jobs/sql/claim.sql).
--
-- Each key's state row is locked as the claim and the trigger lock it (SKIP LOCKED: a key
-- being decided this moment is looked at next time).
WITH stalled AS MATERIALIZED (
    SELECT s.limit_name, s.limit_key,
           CASE WHEN l.concurrency IS NULL THEN %(batch)s ELSE l.concurrency - s.running END AS free
    FROM jobs_limit_state s
    LEFT JOIN jobs_limit l ON l.name = s.limit_name
    WHERE (l.concurrency IS NULL OR s.running < l.concurrency)
      AND EXISTS (SELECT 1 FROM jobs_job p
                  WHERE p.state = 'scheduled' AND p.limit_wait = 'concurrency'
                    AND p.limit_name = s.limit_name AND p.limit_key = s.limit_key)
      AND NOT EXISTS (SELECT 1 FROM jobs_job q
                      WHERE q.limit_name = s.limit_name AND q.limit_key = s.limit_key
                        AND q.state = 'queued')
    FOR UPDATE OF s SKIP LOCKED
), woken AS (
    -- (The ids as an array, as in claim.sql's `woken`, for a plan by primary key.)
    UPDATE jobs_job j
    SET state = 'queued', limit_wait = ''
    WHERE j.id = ANY (ARRAY(
        SELECT w.id
        FROM stalled k
        CROSS JOIN LATERAL (
            SELECT p.id FROM jobs_job p
            WHERE p.state = 'scheduled' AND p.limit_wait = 'concurrency'
              AND p.limit_name = k.limit_name AND p.limit_key = k.limit_key
            ORDER BY p.priority DESC, p.id
            LIMIT greatest(k.free, 0)
            FOR UPDATE SKIP LOCKED) w))
    RETURNING pg_notify('jobs_queued', j.queue_name)
), unused AS (
    DELETE FROM jobs_limit_state s
    WHERE s.id IN (
        SELECT u.id FROM jobs_limit_state u
        WHERE u.running = 0
          AND u.tat <= coalesce(%(now)s, statement_timestamp())
          AND u.next_slot <= coalesce(%(now)s, statement_timestamp())
          AND NOT EXISTS (SELECT 1 FROM jobs_job j
                          WHERE j.limit_name = u.limit_name AND j.limit_key = u.limit_key
                            AND j.state IN ('waiting', 'scheduled', 'queued', 'running'))
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM woken), (SELECT count(*) FROM unused)
