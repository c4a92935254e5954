-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a child (a step's job or a nested node) ended; its parent advances. A step that ends
-- after its workflow failed is compensated if its job succeeded (the job's own state decides).

CREATE OR REPLACE FUNCTION jobs_wf_child_done(p_parent uuid, p_position integer, p_ok boolean,
                                              p_result jsonb, p_error text, p_job uuid)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    wf_status text;
    p jobs_workflow_node;
    left_over integer;
    failed integer;
BEGIN
    SELECT w.status INTO wf_status
    FROM jobs_workflow w JOIN jobs_workflow_node n ON n.workflow_id = w.id
    WHERE n.id = p_parent
    FOR UPDATE OF w;
    SELECT * INTO p FROM jobs_workflow_node WHERE id = p_parent FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p.kind = 'compensation' THEN
        IF p.state = 'running' AND wf_status = 'compensating' THEN
            UPDATE jobs_workflow_node
            SET state = CASE WHEN p_ok THEN 'succeeded' ELSE 'failed' END, result = p_result,
                error = coalesce(p_error, ''), finished_at = statement_timestamp()
            WHERE id = p_parent;
            PERFORM jobs_wf_compensate_next(p.workflow_id);
        END IF;
        RETURN;
    END IF;
    IF p_job IS NOT NULL AND wf_status IN ('compensating', 'failed') THEN
        -- A step that was still running when its workflow failed: if its job succeeded (even
        -- one whose cancel came too late), it is undone too, in its turn by completion
        -- (jobs_wf_compensate_next); otherwise its compensation is not needed.
        IF EXISTS (SELECT 1 FROM jobs_job WHERE id = p_job AND state = 'succeeded')
           AND EXISTS (SELECT 1 FROM jobs_workflow_node WHERE target = p_job AND state = 'pending') THEN
            UPDATE jobs_workflow_node
            SET position = (SELECT max(position) + 1 FROM jobs_workflow_node
                            WHERE workflow_id = p.workflow_id AND kind = 'compensation')
            WHERE target = p_job AND state = 'pending';
            UPDATE jobs_workflow SET status = 'compensating', finished_at = NULL WHERE id = p.workflow_id;
        ELSE
            PERFORM jobs_wf_drop_compensations(p.workflow_id, 'running');
        END IF;
        PERFORM jobs_wf_compensate_next(p.workflow_id);
        RETURN;
    END IF;
    IF wf_status <> 'running' OR p.state <> 'running' THEN
        RETURN;
    END IF;
    IF p.kind IN ('chain', 'chord') THEN
        IF p_position <> p.remaining THEN
            RETURN;
        ELSIF NOT p_ok THEN
            PERFORM jobs_wf_done(p_parent, false, NULL, p_error);
        ELSIF p_position + 1 >= p.size THEN
            PERFORM jobs_wf_done(p_parent, true, p_result, '');
        ELSE
            UPDATE jobs_workflow_node SET remaining = p_position + 1 WHERE id = p_parent;
            PERFORM jobs_wf_start_child(p_parent, p_position + 1, p_result, true);
        END IF;
    ELSIF p.kind = 'group' THEN
        UPDATE jobs_workflow_node
        SET remaining = remaining - 1, failures = failures + (NOT p_ok)::integer
        WHERE id = p_parent
        RETURNING remaining, failures INTO left_over, failed;
        IF NOT p_ok AND p.fail_fast THEN
            PERFORM jobs_wf_done(p_parent, false, NULL, p_error);
        ELSIF left_over = 0 AND failed > 0 THEN
            PERFORM jobs_wf_done(p_parent, false, NULL,
                                 failed || ' of ' || p.size || ' members failed');
        ELSIF left_over = 0 THEN
            PERFORM jobs_wf_done(p_parent, true, jobs_wf_results(p_parent), '');
        END IF;
    END IF;
END $$;
