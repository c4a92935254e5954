-- The console's counts (see jobs_count_inserted.sql): a truncated job table counts nothing.

CREATE OR REPLACE FUNCTION jobs_count_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE jobs_queue_count, jobs_throughput;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_count_truncated AFTER TRUNCATE ON jobs_job
FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_truncated();
