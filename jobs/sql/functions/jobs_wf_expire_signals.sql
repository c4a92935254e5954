-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: signal waits past their deadline fail (the housekeeper calls it in batches).

CREATE OR REPLACE FUNCTION jobs_wf_expire_signals(p_now timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n record;
    expired integer := 0;
BEGIN
    FOR n IN SELECT id, workflow_id FROM jobs_workflow_node
             WHERE kind = 'signal' AND state = 'running'
               AND deadline <= coalesce(p_now, statement_timestamp())
             ORDER BY deadline LIMIT p_limit LOOP
        -- The workflow row first, as everywhere; then the wait is checked again.
        PERFORM 1 FROM jobs_workflow WHERE id = n.workflow_id FOR UPDATE;
        IF EXISTS (SELECT 1 FROM jobs_workflow_node
                   WHERE id = n.id AND state = 'running'
                     AND deadline <= coalesce(p_now, statement_timestamp())) THEN
            PERFORM jobs_wf_done(n.id, false, NULL,
                (SELECT 'timeout: no ' || quote_literal(signal_name) || ' signal within '
                        || timeout || ' s' FROM jobs_workflow_node WHERE id = n.id));
            expired := expired + 1;
        END IF;
    END LOOP;
    RETURN expired;
END $$;
