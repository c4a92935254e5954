-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: the row trigger. When a step's job reaches a final state, its workflow advances in
-- the same transaction as the statement that recorded the outcome (the worker's
-- record_outcomes, the reaper, the claim that expired it, an operator's cancel), so no step is
-- lost and none runs before its input exists. Plain jobs (workflow_node NULL) do not fire it.
-- A step whose cancel was requested but which succeeded all the same ends its node as failed,
-- so its workflow fails and compensates it too (its side effect happened).

CREATE OR REPLACE FUNCTION jobs_wf_job_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent_kind text;
    -- A step whose cancel was requested while it ran ends its place in the workflow as
    -- cancelled even when its handler succeeded (then it is compensated like any other).
    step_ok boolean := NEW.state = 'succeeded' AND NEW.cancel_requested_at IS NULL;
BEGIN
    -- The common case first, in two statements: a group member that succeeded and is not
    -- the last. The workflow row is locked first, as on every path.
    IF step_ok THEN
        SELECT n.kind INTO parent_kind
        FROM jobs_workflow_node n JOIN jobs_workflow w ON w.id = n.workflow_id
        WHERE n.id = NEW.workflow_node AND w.status = 'running'
        FOR UPDATE OF w;
        IF parent_kind = 'group' THEN
            UPDATE jobs_workflow_node SET remaining = remaining - 1
            WHERE id = NEW.workflow_node AND state = 'running' AND remaining > 1;
            IF FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
    END IF;
    PERFORM jobs_wf_child_done(
        NEW.workflow_node, NEW.workflow_position, step_ok, NEW.result,
        CASE WHEN step_ok THEN ''
             WHEN NEW.state = 'succeeded' THEN 'cancelled: cancel requested while it ran'
             ELSE NEW.state || ': ' || coalesce(nullif(NEW.last_error, ''), 'no error recorded') END,
        NEW.id);
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER jobs_wf_job_finished
AFTER UPDATE OF state ON jobs_job
FOR EACH ROW
WHEN (NEW.workflow_node IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
      AND NEW.state IN ('succeeded', 'dead', 'cancelled', 'expired'))
EXECUTE FUNCTION jobs_wf_job_finished();
