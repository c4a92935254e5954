-- Heartbeat: extend, by its own lease (the worker's for a job whose task sets none), each
-- running job of the (job id, claim token) pairs in hand. Rows another transaction has
-- locked (an enqueuer marking a dedupe key lapsed, an operator) are skipped rather than
-- waited for: the caller retries them soon. Rows are found by primary key only, fenced as
-- in record_outcomes.sql.
WITH mine AS (
    SELECT j.id
    FROM jobs_job j
    JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS h(id, token) ON j.id = h.id
    WHERE (j.state, j.worker_id) IS NOT DISTINCT FROM ('running', h.token)
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs_job j
SET lease_expires_at = coalesce(%(now)s, statement_timestamp())
                       + coalesce(j.lease_seconds, %(lease_seconds)s) * interval '1 second'
FROM mine
WHERE j.id = mine.id
RETURNING j.id

