-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: start the child at a position of a chain (its steps, or its nested node).

CREATE OR REPLACE FUNCTION jobs_wf_start_child(p_parent uuid, p_position integer, p_input jsonb,
                                               p_has_input boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    child uuid;
BEGIN
    IF jobs_wf_queue_steps(p_parent, p_position, p_input, p_has_input) = 0 THEN
        SELECT id INTO child FROM jobs_workflow_node WHERE parent = p_parent AND position = p_position;
        IF FOUND THEN
            PERFORM jobs_wf_start(child, p_input, p_has_input);
        END IF;
    END IF;
END $$;
