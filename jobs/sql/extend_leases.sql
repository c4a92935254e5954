-- Heartbeat: extend, by its own lease (the worker's for a job whose task sets none), each
-- running job of the (job id, claim token) pairs in hand. Rows another transaction has
-- locked (an enqueuer marking a dedupe key lapsed, an operator) are skipped rather than
-- waited for: the caller retries them soon. Rows are found by primary key only, fenced as
-- in record_outcomes.sql.
--
-- One row comes back per pair that was still this worker's when the statement began,
-- saying whether it was extended: a pair not returned is no longer held (cancelled,
-- finished, taken back by the reaper) and is not worth trying again; one returned
-- unextended was locked.
WITH held AS (
    SELECT h.id, h.token FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS h(id, token)
), mine AS (
    SELECT j.id
    FROM jobs_job j
    JOIN held h ON j.id = h.id
    WHERE (j.state, j.worker_id) IS NOT DISTINCT FROM ('running', h.token)
    FOR UPDATE OF j SKIP LOCKED
), extended AS (
    UPDATE jobs_job j
    SET lease_expires_at = coalesce(%(now)s, statement_timestamp())
                           + coalesce(j.lease_seconds, %(lease_seconds)s) * interval '1 second'
    FROM mine
    WHERE j.id = mine.id
    RETURNING j.id
)
SELECT j.id, e.id IS NOT NULL
FROM jobs_job j
JOIN held h ON j.id = h.id
LEFT JOIN extended e ON e.id = j.id
WHERE (j.state, j.worker_id) IS NOT DISTINCT FROM ('running', h.token)
