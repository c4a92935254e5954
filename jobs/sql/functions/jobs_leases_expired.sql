-- The reaper's candidates (jobs/sql/reap.sql): running jobs whose lease expired before
-- ``cutoff``, earliest first, at most ``lim``. Read from the running rows through
-- jobs_job_holder and sorted, as jobs_lease_next_expiry.sql says why; inside this function
-- the read cannot become a scan of the whole table. The reaper locks and re-checks them.
-- It returns few rows (expired leases are rare), and says so (ROWS 10): with PostgreSQL's
-- guess for a function, a thousand, the reaper's join of these rows back to jobs_job
-- became a hash join over the whole table wherever the statistics counted every job
-- running (tests/integration/test_claim.py).

CREATE OR REPLACE FUNCTION jobs_leases_expired(cutoff timestamptz, lim integer)
RETURNS TABLE (id uuid, workflow_node uuid)
LANGUAGE plpgsql STABLE
ROWS 10
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
