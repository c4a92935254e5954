-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a pending node starts (chain, chord, group, or a signal wait that may take a kept signal).

CREATE OR REPLACE FUNCTION jobs_wf_start(p_node uuid, p_input jsonb, p_has_input boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n jobs_workflow_node;
    child uuid;
    sig record;
BEGIN
    UPDATE jobs_workflow_node
    SET state = 'running', started_at = statement_timestamp(), finished_at = NULL,
        remaining = CASE WHEN kind = 'group' THEN size ELSE 0 END, failures = 0,
        deadline = CASE WHEN kind = 'signal' AND timeout IS NOT NULL
                        THEN statement_timestamp() + timeout * interval '1 second' END
    WHERE id = p_node AND state = 'pending'
    RETURNING * INTO n;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF n.kind IN ('chain', 'chord') THEN
        IF n.size = 0 THEN
            PERFORM jobs_wf_done(p_node, true, CASE WHEN p_has_input THEN p_input END, '');
        ELSE
            PERFORM jobs_wf_start_child(p_node, 0, p_input, p_has_input);
        END IF;
    ELSIF n.kind = 'group' THEN
        IF n.size = 0 THEN
            PERFORM jobs_wf_done(p_node, true, '[]'::jsonb, '');
            RETURN;
        END IF;
        PERFORM jobs_wf_queue_steps(p_node, NULL, p_input, p_has_input);
        FOR child IN SELECT id FROM jobs_workflow_node WHERE parent = p_node ORDER BY position LOOP
            PERFORM jobs_wf_start(child, p_input, p_has_input);
        END LOOP;
    ELSIF n.kind = 'signal' THEN
        -- A signal sent before the wait was reached is kept; the oldest unconsumed one of the
        -- name is delivered now. The workflow row is locked (by whoever advanced to here),
        -- as send_signal locks it, so a signal and the wait cannot pass each other.
        SELECT id, payload INTO sig FROM jobs_workflow_signal
        WHERE workflow_id = n.workflow_id AND name = n.signal_name AND node IS NULL
        ORDER BY id LIMIT 1;
        IF FOUND THEN
            UPDATE jobs_workflow_signal SET node = p_node WHERE id = sig.id;
            PERFORM jobs_wf_done(p_node, true, sig.payload, '');
        END IF;
    END IF;
END $$;
