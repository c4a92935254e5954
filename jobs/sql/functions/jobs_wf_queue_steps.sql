-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a node's waiting steps become claimable, with the previous result as input.

CREATE OR REPLACE FUNCTION jobs_wf_queue_steps(p_node uuid, p_position integer, p_input jsonb,
                                               p_has_input boolean) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    queued integer;
BEGIN
    -- Waiting steps of a node (one position, or all of a group) become claimable, with the
    -- previous result as their first argument.
    WITH started AS (
        UPDATE jobs_job
        SET state = 'queued', run_at = statement_timestamp(),
            args = CASE WHEN p_has_input THEN jsonb_build_array(p_input) || args ELSE args END
        WHERE workflow_node = p_node AND state = 'waiting'
          AND (p_position IS NULL OR workflow_position = p_position)
        RETURNING queue_name
    ), woken AS (
        SELECT pg_notify('jobs_queued', q.queue_name) FROM (SELECT DISTINCT queue_name FROM started) q
    )
    SELECT (SELECT count(*) FROM started) INTO queued FROM (SELECT count(*) FROM woken) w;
    RETURN queued;
END $$;
