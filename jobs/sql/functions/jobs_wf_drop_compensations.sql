-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: compensations that will not run are cancelled with their jobs.

CREATE OR REPLACE FUNCTION jobs_wf_drop_compensations(p_workflow uuid, p_keep_target_state text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Compensations that will not run (not planned, and their step not still running).
    WITH dropped AS (
        UPDATE jobs_workflow_node c
        SET state = 'cancelled', finished_at = statement_timestamp()
        WHERE c.workflow_id = p_workflow AND c.kind = 'compensation' AND c.state = 'pending'
          AND c.position = 0
          AND (p_keep_target_state IS NULL
               OR NOT EXISTS (SELECT 1 FROM jobs_job j WHERE j.id = c.target AND j.state = p_keep_target_state))
        RETURNING c.job_id
    )
    UPDATE jobs_job SET state = 'cancelled', finished_at = statement_timestamp(),
                        last_error = 'not needed: its step did not succeed, or its workflow did'
    WHERE id IN (SELECT job_id FROM dropped) AND state = 'waiting';
END $$;
