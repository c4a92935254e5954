-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: pending work under a node that failed is cancelled; running steps finish.

CREATE OR REPLACE FUNCTION jobs_wf_cancel_below(p_node uuid, p_reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Pending work under a node that failed: its nodes and its steps not yet running.
    -- Running steps finish; their outcome no longer advances anything.
    WITH RECURSIVE below AS (
        SELECT id FROM jobs_workflow_node WHERE parent = p_node
        UNION ALL
        SELECT n.id FROM jobs_workflow_node n JOIN below b ON n.parent = b.id
    ), nodes AS (
        UPDATE jobs_workflow_node
        SET state = 'cancelled', finished_at = statement_timestamp(), deadline = NULL
        WHERE id IN (SELECT id FROM below) AND state IN ('pending', 'running')
    )
    UPDATE jobs_job
    SET state = 'cancelled', finished_at = statement_timestamp(), last_error = p_reason
    WHERE (workflow_node = p_node OR workflow_node IN (SELECT id FROM below))
      AND state IN ('waiting', 'scheduled', 'queued');
END $$;
