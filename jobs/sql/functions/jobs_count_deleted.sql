-- The console's counts (see jobs_count_inserted.sql): the jobs a statement deleted leave
-- their buckets.

CREATE OR REPLACE FUNCTION jobs_count_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_queue_count (queue_name, bucket, delta)
    SELECT queue_name,
           CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying' ELSE state END,
           -count(*)
    FROM old_rows GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_count_deleted AFTER DELETE ON jobs_job
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deleted();
