-- Take back running jobs whose worker is gone. {lost} is one of two conditions
-- (jobs/store/leases.py), and {candidates} the running rows that meet it, earliest lease
-- first: leases that expired at least a grace period ago (any worker may run this; SKIP
-- LOCKED keeps two reapers apart, and the grace lets a heartbeat that had to retry past a
-- row lock land first; sql/functions/jobs_leases_expired.sql), or the jobs a dead executor
-- of this worker left under its claim token. The re-check in the outer WHERE keeps a job
-- that completed meanwhile completed.
--
-- A job whose attempt never started (started_attempt < attempt: claimed in a batch, still
-- waiting its turn) goes back to 'queued' at once with the attempt given back; the
-- handback is counted, and a job handed back before has its start marked before it runs
-- next, so no job can loop on refunds. A started attempt was used: with attempts left the
-- job waits its backoff (the task's, kept on the row, else the worker's) as 'scheduled',
-- otherwise it goes to the dead-letter state with reason "worker lost". The exponent is
-- clamped as in retry.backoff: 2^1024 overflows and would fail every reap. A job whose
-- cancel was requested while it ran ends 'cancelled' instead: its attempt is over.
--
-- Lock order, as in record_outcomes.sql: the workflows of the steps among them first, in id
-- order, then the job rows (an outcome write that holds a workflow and waits for its job's
-- row must not meet a reaper that holds the row and waits for the workflow).
WITH candidates AS (
    {candidates}
), steps_locked AS (
    SELECT w.id
    FROM candidates c
    JOIN jobs_workflow_node n ON n.id = c.workflow_node
    JOIN jobs_workflow w ON w.id = n.workflow_id
    ORDER BY w.id
    FOR UPDATE OF w
), lost AS (
    SELECT j.id
    FROM jobs_job j JOIN candidates c ON c.id = j.id
    WHERE j.state = 'running' AND {lost}
      AND (SELECT count(*) FROM steps_locked) >= 0
    FOR UPDATE OF j SKIP LOCKED
), decided AS (
    SELECT j.id, j.started_attempt < j.attempt AS unstarted
    FROM jobs_job j JOIN lost l ON l.id = j.id
)
UPDATE jobs_job j
SET state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                 WHEN d.unstarted THEN 'queued'
                 WHEN j.attempt >= j.max_attempts THEN 'dead'
                 ELSE 'scheduled' END,
    attempt = j.attempt - d.unstarted::int,
    worker_ids = CASE WHEN d.unstarted THEN trim_array(j.worker_ids, 1) ELSE j.worker_ids END,
    handbacks = j.handbacks + d.unstarted::int,
    run_at = CASE WHEN d.unstarted THEN coalesce(%(now)s, statement_timestamp())
                  ELSE coalesce(%(now)s, statement_timestamp())
                       + least(coalesce(j.backoff_cap, %(cap)s),
                               coalesce(j.backoff_base, %(base)s)
                               * power(2, least(greatest(j.attempt - 1, 0), 62)))
                         * CASE WHEN coalesce(j.jitter, true) THEN 0.5 + random() * 0.5 ELSE 1 END
                         * interval '1 second' END,
    finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL
                            OR (NOT d.unstarted AND j.attempt >= j.max_attempts)
                       THEN coalesce(%(now)s, statement_timestamp()) END,
    errors = CASE WHEN d.unstarted THEN j.errors
                  ELSE j.errors || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempt,
                      'at', coalesce(%(now)s, statement_timestamp()),
                      'started_at', j.last_attempted_at,
                      'worker', j.worker_id,
                      'exception', 'jobs.exceptions.WorkerLost',
                      'message', coalesce('worker lost: ' || %(reason)s::text,
                                          'worker lost: lease expired at ' || j.lease_expires_at::text),
                      'traceback', '')) END,
    last_error = CASE WHEN d.unstarted THEN j.last_error ELSE 'worker lost' END,
    cancel_requested_at = NULL,
    worker_id = NULL,
    lease_expires_at = NULL
FROM decided d
WHERE j.id = d.id
  AND j.state = 'running' AND {lost}
RETURNING j.id, j.state, j.task_path, j.attempt, d.unstarted, j.queue_name
