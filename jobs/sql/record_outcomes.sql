-- Record the outcomes of many attempts in one statement, fenced, and mark the starts of
-- attempts still running.
--
-- Each outcome names the job and the attempt it belongs to. A row changes only while it
-- is still running under this worker's claim token and the same attempt: if the lease
-- lapsed and the reaper (or another worker) took the job, zero rows match and the stale
-- outcome is dropped. Each recorded row comes back with the state it ended in (a cancel
-- requested while it ran makes that 'cancelled' whatever the attempt came to): the caller
-- compares the ids with what it sent, and counts each attempt by its job's state.
--
-- state:  'succeeded' (result), 'queued' (retry/snooze/release after delay seconds: a
--         delay makes it 'scheduled'), 'dead' (error).
-- refund: 1 gives the attempt back (snooze, release); the start mark goes back with it.
-- progress: the attempt's last progress report (jobs/progress.py), if it made any.
-- started: (id, attempt) of running attempts whose start is not yet marked; the lease,
--          short until the start (jobs/sql/claim.sql), is extended to the job's own.
--
-- Rows are found by primary key only. The fence is one row comparison (the same as three
-- equalities: none of the values can be NULL but worker_id) because no index can serve it,
-- so the planner cannot start from the running rows instead: with statistics that still
-- counted none running (a drain just after a bulk enqueue), it did, and read the whole
-- outcome list once per running row of every worker (41 ms for 200 outcomes, not 6).
--
-- A job whose cancel was requested while it ran (cancel_requested_at) ends 'cancelled'
-- unless it succeeded (the work was done): a retry, snooze or release of it would only run
-- what the operator withdrew. Leaving 'running' here is what gives back its concurrency slot
-- (the limit trigger) and ends its workflow step (the workflow trigger).
--
-- Lock order: the workflows of the batch's steps first, in id order, then the job rows (the
-- workflow trigger locks each step's workflow again, already held). The trigger alone would
-- lock them in the order the rows were written: two executors' batches with steps of the
-- same two workflows (chords fanning in) took them in opposite orders and deadlocked.
-- steps_locked runs before any row is written: recorded's condition on it is a one-time
-- filter the planner evaluates first. A batch the worker knows holds no workflow step
-- skips it (the join would cost a lookup per outcome for nothing): the store runs this
-- statement with the `/* steps */ true` below written as false, a second prepared
-- statement. Not a bound parameter: with one, the custom plan that prunes this CTE always
-- looked cheaper than the generic plan, so PostgreSQL planned the statement anew at every
-- run (0.7 ms of a 1.3 ms batch of 100; tests/integration/test_prepared_plans.py).
WITH steps_locked AS (
    SELECT w.id
    FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS v(id uuid)
    JOIN jobs_job j ON j.id = v.id
    JOIN jobs_workflow_node n ON n.id = j.workflow_node
    JOIN jobs_workflow w ON w.id = n.workflow_id
    WHERE /* steps */ true
    ORDER BY w.id
    FOR UPDATE OF w
), marked AS (
    UPDATE jobs_job j
    SET started_attempt = s.attempt,
        lease_expires_at = coalesce(%(now)s, statement_timestamp())
                           + coalesce(j.lease_seconds, %(lease_seconds)s) * interval '1 second'
    FROM jsonb_to_recordset(%(started)s::jsonb) AS s(id uuid, attempt int)
    WHERE j.id = s.id
      AND (j.state, j.worker_id, j.attempt) IS NOT DISTINCT FROM ('running', %(worker)s::uuid, s.attempt)
    RETURNING j.id
), recorded AS (
    UPDATE jobs_job j
    SET state = CASE
            WHEN v.state <> 'succeeded' AND j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN v.state = 'queued' AND coalesce(v.delay, 0) > 0 THEN 'scheduled'
            ELSE v.state
        END,
        result = CASE WHEN v.state = 'succeeded' THEN v.result ELSE j.result END,
        finished_at = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NULL THEN NULL
                           ELSE coalesce(%(now)s, statement_timestamp()) END,
        run_at = CASE
            WHEN v.state = 'queued' AND j.cancel_requested_at IS NULL
            THEN coalesce(%(now)s, statement_timestamp()) + coalesce(v.delay, 0) * interval '1 second'
            ELSE j.run_at
        END,
        attempt = j.attempt - coalesce(v.refund, 0),
        started_attempt = CASE WHEN coalesce(v.refund, 0) > 0
                               THEN least(j.started_attempt, j.attempt - 1)
                               ELSE j.attempt END,
        worker_ids = CASE WHEN coalesce(v.refund, 0) > 0
                          THEN trim_array(j.worker_ids, 1) ELSE j.worker_ids END,
        errors = CASE WHEN v.error IS NULL THEN j.errors
                      ELSE j.errors || jsonb_build_array(
                          v.error || jsonb_build_object('at', coalesce(%(now)s, statement_timestamp()),
                                                        'started_at', j.last_attempted_at,
                                                        'attempt', j.attempt,
                                                        'worker', j.worker_id))
                 END,
        last_error = coalesce(v.error ->> 'message', j.last_error),
        progress = CASE WHEN v.progress IS NULL THEN j.progress
                        ELSE v.progress || jsonb_build_object('updated_at', coalesce(%(now)s, statement_timestamp()))
                   END,
        -- Kept only on a job that succeeded all the same (its workflow reads it).
        cancel_requested_at = CASE WHEN v.state = 'succeeded' THEN j.cancel_requested_at END,
        worker_id = NULL,
        lease_expires_at = NULL
    FROM jsonb_to_recordset(%(outcomes)s::jsonb)
         AS v(id uuid, attempt int, state text, result jsonb, delay float8, refund int, error jsonb,
            progress jsonb)
    WHERE j.id = v.id
      AND (j.state, j.worker_id, j.attempt) IS NOT DISTINCT FROM ('running', %(worker)s::uuid, v.attempt)
      AND (SELECT count(*) FROM steps_locked) >= 0
    RETURNING j.id, j.state
)
SELECT id, state FROM recorded
