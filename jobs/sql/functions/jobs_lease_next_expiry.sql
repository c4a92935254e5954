-- The housekeeper's next lease expiry (jobs.store.next_due): the earliest lease of a
-- running job. Running rows are indexed by the claim token that holds them
-- (jobs_job_holder), not by their lease, so that a heartbeat or a start mark is a HOT
-- update: the earliest lease is read from all of them, which are few (what the workers
-- hold). Inside this function that read cannot become a scan of the whole table, whatever
-- statistics the table was analysed with (a busy fleet analysed while every row ran).

CREATE OR REPLACE FUNCTION jobs_lease_next_expiry() RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN (SELECT min(j.lease_expires_at) FROM jobs_job j WHERE j.state = 'running');
END
$$;
