-- The console's counts (see jobs_count_inserted.sql) and attempts ended per minute.
-- One pass over the statement's rows, old ones counted -1 and new ones +1, per (queue, task,
-- bucket): the net changes are the buckets' deltas, and the attempts that ended are the net
-- arrivals in 'succeeded' and in 'dead' or 'retrying' (failed: dead, or waiting for a retry
-- after a failed attempt or a lost worker). A job that only moves between buckets of the
-- same kind (a retry coming due) nets out; one given back unstarted or snoozed got its
-- attempt back and arrives as 'queued' (unless it had failed before: rare, counted). No
-- join of the old rows with the new: that would cost the hot statements per row. A statement
-- that moves no job between buckets (a heartbeat, a start mark) appends nothing.

CREATE OR REPLACE FUNCTION jobs_count_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        SELECT queue_name, task_path, bucket, sum(delta) AS delta,
               (array_agg(last_error ORDER BY id DESC)
                    FILTER (WHERE delta > 0 AND bucket IN ('dead', 'retrying')))[1] AS last_error,
               (array_agg(id ORDER BY id DESC)
                    FILTER (WHERE delta > 0 AND bucket IN ('dead', 'retrying')))[1] AS last_job_id
        FROM (SELECT queue_name, task_path,
                     CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying'
                          ELSE state END AS bucket,
                     -1 AS delta, NULL::text AS last_error, NULL::uuid AS id
              FROM old_rows
              UNION ALL
              SELECT queue_name, task_path,
                     CASE WHEN state IN ('queued', 'scheduled') AND attempt > 0 THEN 'retrying'
                          ELSE state END,
                     1, last_error, id
              FROM new_rows) AS changes
        GROUP BY 1, 2, 3
        HAVING sum(delta) <> 0
    ), counted AS (
        INSERT INTO jobs_queue_count (queue_name, bucket, delta)
        SELECT queue_name, bucket, sum(delta) FROM moved GROUP BY 1, 2
    )
    INSERT INTO jobs_throughput (minute, queue_name, task_path, succeeded, failed, last_error, last_job_id)
    SELECT date_trunc('minute', statement_timestamp()), queue_name, task_path,
           coalesce(sum(delta) FILTER (WHERE bucket = 'succeeded'), 0),
           coalesce(sum(delta) FILTER (WHERE bucket <> 'succeeded'), 0),
           coalesce(max(last_error), ''), (array_agg(last_job_id) FILTER (WHERE last_job_id IS NOT NULL))[1]
    FROM moved
    WHERE delta > 0 AND bucket IN ('succeeded', 'dead', 'retrying')
    GROUP BY queue_name, task_path;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_count_updated AFTER UPDATE ON jobs_job
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_updated();
