-- The enqueue statements' wake-up check: does the queue already have a due job (then its
-- workers are busy or about to claim, and no NOTIFY is needed)? Written inline, prepared
-- statements planned it from the table's statistics, and on a table analysed while empty that
-- plan is a scan of the whole table, kept until the next ANALYZE: every enqueue then read
-- every queued row. Inside this function the plan cannot be a scan, whatever the statistics
-- say; the function is STABLE, so it reads the queue as the calling statement does (without
-- the rows that statement inserts).

CREATE OR REPLACE FUNCTION jobs_queue_has_due(queue text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobs_job j WHERE j.state = 'queued' AND j.queue_name = queue);
END
$$;
