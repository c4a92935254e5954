-- Write the latest progress reports of running attempts (jobs/progress.py), each only while
-- its job runs under this worker's claim token and the same attempt. A sibling of
-- record_outcomes.sql rather than a part of it, so that batches without progress (nearly
-- all) run the statement they always ran. Rows are found by primary key only, fenced as
-- there.
UPDATE jobs_job j
SET progress = p.progress
               || jsonb_build_object('updated_at', coalesce(%(now)s, statement_timestamp()))
FROM jsonb_to_recordset(%(reports)s::jsonb) AS p(id uuid, attempt int, progress jsonb)
WHERE j.id = p.id
  AND (j.state, j.worker_id, j.attempt) IS NOT DISTINCT FROM ('running', %(worker)s::uuid, p.attempt)
RETURNING j.id

