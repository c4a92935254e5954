-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: an operator retries a failed step: the nodes above it reopen and it is queued again.

CREATE OR REPLACE FUNCTION jobs_wf_retry(p_job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j record;
    wf record;
    node jobs_workflow_node;
    at_node uuid;
BEGIN
    SELECT id, state, workflow_node, workflow_position INTO j FROM jobs_job WHERE id = p_job;
    IF NOT FOUND OR j.workflow_node IS NULL THEN
        RETURN 'not a workflow step';
    END IF;
    SELECT w.* INTO wf FROM jobs_workflow w JOIN jobs_workflow_node n ON n.workflow_id = w.id
    WHERE n.id = j.workflow_node FOR UPDATE OF w;
    IF j.state NOT IN ('dead', 'expired') THEN
        RETURN 'the step is ' || j.state || ', not failed';
    END IF;
    IF wf.status NOT IN ('running', 'failed') THEN
        RETURN 'the workflow is ' || wf.status;
    END IF;
    IF EXISTS (SELECT 1 FROM jobs_workflow_node WHERE workflow_id = wf.id AND kind = 'compensation'
                                                 AND state IN ('running', 'succeeded', 'failed')) THEN
        RETURN 'compensations have run';
    END IF;
    -- A group being reopened brings back the plain steps its failure cancelled, not the
    -- chains or groups inside it (their input is gone): refuse rather than hang.
    IF EXISTS (
        WITH RECURSIVE up AS (
            SELECT id, parent, kind, state FROM jobs_workflow_node WHERE id = j.workflow_node
            UNION ALL
            SELECT n.id, n.parent, n.kind, n.state FROM jobs_workflow_node n JOIN up ON n.id = up.parent
        )
        SELECT 1 FROM up JOIN jobs_workflow_node c ON c.parent = up.id
        WHERE up.kind = 'group' AND up.state <> 'running' AND c.state = 'cancelled'
    ) THEN
        RETURN 'a chain or group inside its failed group was cancelled; retrying one step cannot bring it back';
    END IF;
    -- Reopen the nodes above the step, from it up to the first one still running.
    at_node := j.workflow_node;
    WHILE at_node IS NOT NULL LOOP
        SELECT * INTO node FROM jobs_workflow_node WHERE id = at_node FOR UPDATE;
        IF node.state = 'running' THEN
            IF node.kind = 'group' THEN
                UPDATE jobs_workflow_node SET remaining = remaining + 1, failures = greatest(failures - 1, 0)
                WHERE id = at_node;
            END IF;
            EXIT;
        END IF;
        UPDATE jobs_workflow_node SET state = 'running', error = '', finished_at = NULL,
            remaining = CASE WHEN kind = 'group'
                             THEN (SELECT count(*) FROM jobs_job
                                   WHERE workflow_node = at_node AND state <> 'succeeded')
                                  + (SELECT count(*) FROM jobs_workflow_node
                                     WHERE parent = at_node AND state <> 'succeeded')
                             ELSE remaining END,
            failures = 0
        WHERE id = at_node;
        IF node.kind IN ('chain', 'chord') THEN
            PERFORM jobs_wf_rewait(at_node, node.remaining);
        ELSIF node.kind = 'group' THEN
            -- Members a fast failure cancelled go again.
            UPDATE jobs_job SET state = 'queued', attempt = 0, started_attempt = 0, handbacks = 0,
                                worker_ids = '{}', run_at = statement_timestamp(), finished_at = NULL
            WHERE workflow_node = at_node AND state = 'cancelled' AND id <> p_job;
        END IF;
        at_node := node.parent;
    END LOOP;
    IF wf.status = 'failed' THEN
        UPDATE jobs_workflow SET status = 'running', error = '', finished_at = NULL WHERE id = wf.id;
        WITH kept AS (
            UPDATE jobs_workflow_node SET state = 'pending', position = 0, finished_at = NULL
            WHERE workflow_id = wf.id AND kind = 'compensation' AND state = 'cancelled'
            RETURNING job_id
        )
        UPDATE jobs_job SET state = 'waiting', finished_at = NULL, last_error = ''
        WHERE id IN (SELECT job_id FROM kept) AND state = 'cancelled';
    END IF;
    UPDATE jobs_job SET state = 'queued', attempt = 0, started_attempt = 0, handbacks = 0,
                        worker_ids = '{}', run_at = statement_timestamp(), finished_at = NULL,
                        expires_at = NULL, result = NULL
    WHERE id = p_job;
    PERFORM pg_notify('jobs_queued', (SELECT queue_name FROM jobs_job WHERE id = p_job));
    RETURN 'retried';
END $$;
