-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a chain reopened by a retry: what its failure cancelled after a position waits again.

CREATE OR REPLACE FUNCTION jobs_wf_rewait(p_node uuid, p_after integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- A chain reopened by a retry: what its failure cancelled after position p_after, never
    -- started, waits again.
    WITH RECURSIVE below AS (
        SELECT id FROM jobs_workflow_node WHERE parent = p_node AND position > p_after
        UNION ALL
        SELECT n.id FROM jobs_workflow_node n JOIN below b ON n.parent = b.id
    ), nodes AS (
        UPDATE jobs_workflow_node SET state = 'pending', finished_at = NULL, error = ''
        WHERE id IN (SELECT id FROM below) AND state = 'cancelled'
    )
    UPDATE jobs_job SET state = 'waiting', finished_at = NULL, last_error = ''
    WHERE state = 'cancelled'
      AND ((workflow_node = p_node AND workflow_position > p_after)
           OR workflow_node IN (SELECT id FROM below));
END $$;
