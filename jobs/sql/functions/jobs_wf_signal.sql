-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a signal sent to a workflow is delivered to a running wait, or kept for a later one.

CREATE OR REPLACE FUNCTION jobs_wf_signal(p_workflow uuid, p_name text, p_payload jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    wf_status text;
    waiting uuid;
    sig bigint;
BEGIN
    SELECT status INTO wf_status FROM jobs_workflow WHERE id = p_workflow FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO jobs_workflow_signal (workflow_id, name, payload, sent_at)
    VALUES (p_workflow, p_name, p_payload, statement_timestamp())
    RETURNING id INTO sig;
    IF wf_status <> 'running' THEN
        -- Recorded, but no wait of a finished (or failing) workflow will take it.
        RETURN 'ignored';
    END IF;
    SELECT id INTO waiting FROM jobs_workflow_node
    WHERE workflow_id = p_workflow AND kind = 'signal' AND signal_name = p_name AND state = 'running'
    ORDER BY started_at, id LIMIT 1;
    IF NOT FOUND THEN
        RETURN 'kept';
    END IF;
    UPDATE jobs_workflow_signal SET node = waiting WHERE id = sig;
    PERFORM jobs_wf_done(waiting, true, p_payload, '');
    RETURN 'delivered';
END $$;
