-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a node ends and its parent (or the workflow) advances.

CREATE OR REPLACE FUNCTION jobs_wf_done(p_node uuid, p_ok boolean, p_result jsonb, p_error text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n jobs_workflow_node;
BEGIN
    UPDATE jobs_workflow_node
    SET state = CASE WHEN p_ok THEN 'succeeded' ELSE 'failed' END,
        result = p_result, error = coalesce(p_error, ''), finished_at = statement_timestamp(),
        deadline = NULL
    WHERE id = p_node AND state = 'running'
    RETURNING * INTO n;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT p_ok THEN
        PERFORM jobs_wf_cancel_below(p_node, 'cancelled: an earlier part of its workflow failed');
    END IF;
    IF n.parent IS NULL THEN
        PERFORM jobs_wf_finish(n.workflow_id, p_ok, p_result, p_error);
    ELSE
        PERFORM jobs_wf_child_done(n.parent, n.position, p_ok, p_result, p_error, NULL);
    END IF;
END $$;
