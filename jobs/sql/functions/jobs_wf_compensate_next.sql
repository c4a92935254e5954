-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: the next compensation starts, once no step whose compensation may be needed is still
-- running, in reverse order of their steps' completion (the step that succeeded last is undone
-- first, wherever it sat in the workflow).

CREATE OR REPLACE FUNCTION jobs_wf_compensate_next(p_workflow uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    next_node uuid;
BEGIN
    IF EXISTS (SELECT 1 FROM jobs_workflow_node
               WHERE workflow_id = p_workflow AND kind = 'compensation' AND state = 'running') THEN
        RETURN;
    END IF;
    -- A step whose compensation may still be needed has not ended: its outcome decides
    -- whether it is undone, and it would be undone first (it finishes last).
    IF EXISTS (SELECT 1 FROM jobs_workflow_node c JOIN jobs_job j ON j.id = c.target
               WHERE c.workflow_id = p_workflow AND c.kind = 'compensation' AND c.state = 'pending'
                 AND j.state = 'running') THEN
        RETURN;
    END IF;
    -- The turns of those still to run: the step that finished last first, after the turns
    -- already taken.
    UPDATE jobs_workflow_node c
    SET position = plan.base + plan.turn
    FROM (SELECT c.id,
                 row_number() OVER (ORDER BY j.finished_at DESC, j.id DESC) AS turn,
                 (SELECT coalesce(max(position), 0) FROM jobs_workflow_node
                  WHERE workflow_id = p_workflow AND kind = 'compensation' AND state <> 'pending') AS base
          FROM jobs_workflow_node c JOIN jobs_job j ON j.id = c.target
          WHERE c.workflow_id = p_workflow AND c.kind = 'compensation' AND c.state = 'pending'
            AND c.position > 0) plan
    WHERE c.id = plan.id AND c.position IS DISTINCT FROM plan.base + plan.turn;
    SELECT id INTO next_node FROM jobs_workflow_node
    WHERE workflow_id = p_workflow AND kind = 'compensation' AND state = 'pending' AND position > 0
    ORDER BY position LIMIT 1;
    IF FOUND THEN
        UPDATE jobs_workflow_node SET state = 'running', started_at = statement_timestamp()
        WHERE id = next_node;
        PERFORM jobs_wf_queue_steps(next_node, 0, NULL, false);
    ELSIF NOT EXISTS (SELECT 1 FROM jobs_workflow_node
                      WHERE workflow_id = p_workflow AND kind = 'compensation' AND state = 'pending') THEN
        UPDATE jobs_workflow SET status = 'failed', finished_at = statement_timestamp()
        WHERE id = p_workflow AND status = 'compensating';
    END IF;
END $$;
