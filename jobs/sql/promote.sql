-- Move scheduled jobs that came due to 'queued', where the claim sees them, and wake the
-- workers of their queues. Any worker's housekeeping runs this when the earliest scheduled
-- job is due; SKIP LOCKED keeps concurrent promoters apart. Returns the queues woken.
-- Jobs parked on a concurrency limit are not due at any time (a release wakes them,
-- jobs/sql/claim.sql): the index this reads (jobs_job_scheduled) leaves them out.
WITH due AS (
    SELECT id
    FROM jobs_job
    WHERE state = 'scheduled' AND limit_wait <> 'concurrency'
      AND run_at <= coalesce(%(now)s, statement_timestamp())
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE jobs_job j
    SET state = 'queued'
    FROM due
    WHERE j.id = due.id AND j.state = 'scheduled' AND j.limit_wait <> 'concurrency'
    RETURNING j.queue_name
)
SELECT q.queue_name, q.count, pg_notify('jobs_queued', q.queue_name)
FROM (SELECT queue_name, count(*) AS count FROM promoted GROUP BY queue_name) AS q
