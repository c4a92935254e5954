-- The console's counts per (queue, bucket) are kept by statement-level triggers with
-- transition tables: each statement appends one row per (queue, bucket) whose count it
-- changed, so the counts are exact and no row is updated by every worker (a hot row would
-- serialise the claims); jobs.stats.compact folds the rows together. Buckets: 'retrying' is a
-- queued or scheduled job that has used an attempt; the others are the states.
-- Here: the jobs a statement inserted arrive in their buckets.

CREATE OR REPLACE FUNCTION jobs_count_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_queue_count (queue_name, bucket, delta)
    SELECT queue_name,
           CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying' ELSE state END,
           count(*)
    FROM new_rows GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_count_inserted AFTER INSERT ON jobs_job
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_inserted();
