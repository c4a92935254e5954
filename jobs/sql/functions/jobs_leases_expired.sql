-- The reaper's candidates (jobs/sql/reap.sql): running jobs whose lease expired before
-- ``cutoff``, earliest first, at most ``lim``. Read from the running rows through
-- jobs_job_holder and sorted, as jobs_lease_next_expiry.sql says why; inside this function
-- the read cannot become a scan of the whole table. The reaper locks and re-checks them.

CREATE OR REPLACE FUNCTION jobs_leases_expired(cutoff timestamptz, lim integer)
RETURNS TABLE (id uuid, workflow_node uuid)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
        SELECT j.id, j.workflow_node
        FROM jobs_job j
        WHERE j.state = 'running' AND j.lease_expires_at < cutoff
        ORDER BY j.lease_expires_at
        LIMIT lim;
END
$$;
