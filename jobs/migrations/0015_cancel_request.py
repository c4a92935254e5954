"""A cancel of a running job is a request; workflows count a step as ended when its attempt
ends; compensations run in reverse order of completion.

An operator's cancel of a running job used to make it 'cancelled' at once, while its handler
still ran: its concurrency slot was given back (the limit trigger fires as a job leaves
'running') and its workflow failed and compensated around a side effect still under way.
Now the cancel sets ``cancel_requested_at`` and the job stays 'running' under its lease until
its attempt ends (jobs/sql/record_outcomes.sql, reap.sql); only then do the slot and the
step's place go.

The workflow functions below replace those of 0012_workflows:

- jobs_wf_job_finished: a step whose cancel was requested but which succeeded all the same
  ends its node as failed ("cancelled"), so its workflow fails and compensates it too (its
  side effect happened).
- jobs_wf_child_done: a step that ends after its workflow failed is compensated if its job
  succeeded (the job's own state decides, not the node's outcome).
- jobs_wf_compensate_next: compensations start only once no step whose compensation may be
  needed is still running, and go in reverse order of their steps' completion (a step that
  succeeded last is undone first, wherever it sat in the workflow).
- jobs_wf_cancel: a running step of a cancelled workflow gets a cancel request too.
"""

from django.db import migrations, models
from jobs.migrations import APP_LABEL

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION jobs_wf_compensate_next(p_workflow uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    next_node uuid;
BEGIN
    IF EXISTS (SELECT 1 FROM jobs_workflow_node
               WHERE workflow_id = p_workflow AND kind = 'compensation' AND state = 'running') THEN
        RETURN;
    END IF;
    -- A step whose compensation may still be needed has not ended: its outcome decides
    -- whether it is undone, and it would be undone first (it finishes last).
    IF EXISTS (SELECT 1 FROM jobs_workflow_node c JOIN jobs_job j ON j.id = c.target
               WHERE c.workflow_id = p_workflow AND c.kind = 'compensation' AND c.state = 'pending'
                 AND j.state = 'running') THEN
        RETURN;
    END IF;
    -- The turns of those still to run: the step that finished last first, after the turns
    -- already taken.
    UPDATE jobs_workflow_node c
    SET position = plan.base + plan.turn
    FROM (SELECT c.id,
                 row_number() OVER (ORDER BY j.finished_at DESC, j.id DESC) AS turn,
                 (SELECT coalesce(max(position), 0) FROM jobs_workflow_node
                  WHERE workflow_id = p_workflow AND kind = 'compensation' AND state <> 'pending') AS base
          FROM jobs_workflow_node c JOIN jobs_job j ON j.id = c.target
          WHERE c.workflow_id = p_workflow AND c.kind = 'compensation' AND c.state = 'pending'
            AND c.position > 0) plan
    WHERE c.id = plan.id AND c.position IS DISTINCT FROM plan.base + plan.turn;
    SELECT id INTO next_node FROM jobs_workflow_node
    WHERE workflow_id = p_workflow AND kind = 'compensation' AND state = 'pending' AND position > 0
    ORDER BY position LIMIT 1;
    IF FOUND THEN
        UPDATE jobs_workflow_node SET state = 'running', started_at = statement_timestamp()
        WHERE id = next_node;
        PERFORM jobs_wf_queue_steps(next_node, 0, NULL, false);
    ELSIF NOT EXISTS (SELECT 1 FROM jobs_workflow_node
                      WHERE workflow_id = p_workflow AND kind = 'compensation' AND state = 'pending') THEN
        UPDATE jobs_workflow SET status = 'failed', finished_at = statement_timestamp()
        WHERE id = p_workflow AND status = 'compensating';
    END IF;
END $$;

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

CREATE OR REPLACE FUNCTION jobs_wf_cancel(p_workflow uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    wf_status text;
BEGIN
    SELECT status INTO wf_status FROM jobs_workflow WHERE id = p_workflow FOR UPDATE;
    IF NOT FOUND OR wf_status NOT IN ('running', 'compensating') THEN
        RETURN wf_status;
    END IF;
    UPDATE jobs_workflow SET status = 'cancelled', error = 'cancelled', finished_at = statement_timestamp()
    WHERE id = p_workflow;
    UPDATE jobs_workflow_node SET state = 'cancelled', finished_at = statement_timestamp(), deadline = NULL
    WHERE workflow_id = p_workflow AND state IN ('pending', 'running');
    UPDATE jobs_job SET state = 'cancelled', finished_at = statement_timestamp(),
                        last_error = 'cancelled with its workflow'
    WHERE workflow_node IN (SELECT id FROM jobs_workflow_node WHERE workflow_id = p_workflow)
      AND state IN ('waiting', 'scheduled', 'queued');
    -- Running steps finish their attempt (their handlers may look); one that fails is not
    -- retried.
    UPDATE jobs_job SET cancel_requested_at = coalesce(cancel_requested_at, statement_timestamp())
    WHERE workflow_node IN (SELECT id FROM jobs_workflow_node WHERE workflow_id = p_workflow)
      AND state = 'running';
    RETURN 'cancelled';
END $$;
"""


def _functions_of_0012() -> str:
    from importlib import import_module

    return str(import_module("jobs.migrations.0012_workflows").WORKFLOW_FUNCTIONS)


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0014_wake_check"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="cancel_requested_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        # Backwards: 0012's source of every workflow function (the trigger stays as it is).
        migrations.RunSQL(
            FUNCTIONS,
            reverse_sql=_functions_of_0012().replace(
                "CREATE TRIGGER jobs_wf_job_finished",
                "DROP TRIGGER jobs_wf_job_finished ON jobs_job;\nCREATE TRIGGER jobs_wf_job_finished",
            ),
        ),
    ]
