-- The workflow engine inside the database (jobs/workflows/): a step is a job row ('waiting'
-- until reached); chains, groups, chords, signal waits and compensations are
-- jobs_workflow_node rows. Every advancement locks the workflow row first, then its nodes, so
-- two workers finishing the last two members of a group queue behind that lock and the
-- callback starts once.
-- Here: a group's results in position order, for its callback.

CREATE OR REPLACE FUNCTION jobs_wf_results(p_group uuid) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(x.result ORDER BY x.pos), '[]'::jsonb)
    FROM (SELECT workflow_position AS pos, result FROM jobs_job WHERE workflow_node = p_group
          UNION ALL
          SELECT position, result FROM jobs_workflow_node WHERE parent = p_group) x
$$;
