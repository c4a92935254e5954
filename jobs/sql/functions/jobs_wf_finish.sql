-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: the workflow ends; a failure plans the compensations of the steps that succeeded.

CREATE OR REPLACE FUNCTION jobs_wf_finish(p_workflow uuid, p_ok boolean, p_result jsonb, p_error text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_ok THEN
        UPDATE jobs_workflow SET status = 'succeeded', result = p_result, finished_at = statement_timestamp()
        WHERE id = p_workflow;
        PERFORM jobs_wf_drop_compensations(p_workflow, NULL);
        RETURN;
    END IF;
    UPDATE jobs_workflow SET status = 'compensating', error = coalesce(p_error, '') WHERE id = p_workflow;
    -- The compensations of the steps that succeeded run one after another, the step that
    -- finished last first. Those of steps still running wait for their outcome; the rest
    -- are not needed.
    UPDATE jobs_workflow_node c
    SET position = plan.turn
    FROM (SELECT c.id, row_number() OVER (ORDER BY j.finished_at DESC, j.id DESC) AS turn
          FROM jobs_workflow_node c JOIN jobs_job j ON j.id = c.target
          WHERE c.workflow_id = p_workflow AND c.kind = 'compensation' AND c.state = 'pending'
            AND j.state = 'succeeded') plan
    WHERE c.id = plan.id;
    PERFORM jobs_wf_drop_compensations(p_workflow, 'running');
    PERFORM jobs_wf_compensate_next(p_workflow);
END $$;
