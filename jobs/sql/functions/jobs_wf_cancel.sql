-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: an operator cancels a workflow: pending work is cancelled, and a running step gets a
-- cancel request (it finishes its attempt; one that fails is not retried).

CREATE OR REPLACE FUNCTION jobs_wf_cancel(p_workflow uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    wf_status text;
BEGIN
    SELECT status INTO wf_status FROM jobs_workflow WHERE id = p_workflow FOR UPDATE;
    IF NOT FOUND OR wf_status NOT IN ('running', 'compensating') THEN
        RETURN wf_status;
    END IF;
    UPDATE jobs_workflow SET status = 'cancelled', error = 'cancelled', finished_at = statement_timestamp()
    WHERE id = p_workflow;
    UPDATE jobs_workflow_node SET state = 'cancelled', finished_at = statement_timestamp(), deadline = NULL
    WHERE workflow_id = p_workflow AND state IN ('pending', 'running');
    UPDATE jobs_job SET state = 'cancelled', finished_at = statement_timestamp(),
                        last_error = 'cancelled with its workflow'
    WHERE workflow_node IN (SELECT id FROM jobs_workflow_node WHERE workflow_id = p_workflow)
      AND state IN ('waiting', 'scheduled', 'queued');
    -- Running steps finish their attempt (their handlers may look); one that fails is not
    -- retried.
    UPDATE jobs_job SET cancel_requested_at = coalesce(cancel_requested_at, statement_timestamp())
    WHERE workflow_node IN (SELECT id FROM jobs_workflow_node WHERE workflow_id = p_workflow)
      AND state = 'running';
    RETURN 'cancelled';
END $$;
