-- When a job under a limit stops running (succeeded, failed, retried, released, reaped,
-- cancelled: any way out of 'running'), its key gives the slot back and, if the key now has a
-- slot free, its next parked job becomes claimable, in the same transaction, keeping its place
-- in the queue (its due time is left as it was). The key's state row is locked first, as the
-- claim (jobs/sql/claim.sql) locks it, so a claim that is deciding this key either sees the
-- slot free or has parked its jobs before this looks for one: no wake-up is lost. Under a
-- concurrency lowered below what runs, releases over the new limit wake nothing. The
-- housekeeper's safety net by key is jobs/sql/tend_limit_keys.sql.

CREATE OR REPLACE FUNCTION jobs_limit_left_running() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    still_running integer;
    most integer;
    woken_queue text;
BEGIN
    UPDATE jobs_limit_state
    SET running = greatest(running - 1, 0)
    WHERE limit_name = NEW.limit_name AND limit_key = NEW.limit_key
    RETURNING running INTO still_running;
    SELECT concurrency INTO most FROM jobs_limit WHERE name = NEW.limit_name;
    IF most IS NOT NULL AND still_running >= most THEN
        RETURN NULL;
    END IF;
    UPDATE jobs_job
    SET state = 'queued', limit_wait = ''
    WHERE id = (SELECT id FROM jobs_job
                WHERE state = 'scheduled' AND limit_wait = 'concurrency'
                  AND limit_name = NEW.limit_name AND limit_key = NEW.limit_key
                ORDER BY priority DESC, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
    RETURNING queue_name INTO woken_queue;
    IF woken_queue IS NOT NULL THEN
        PERFORM pg_notify('jobs_queued', woken_queue);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_limit_left_running
AFTER UPDATE OF state ON jobs_job
FOR EACH ROW
WHEN (OLD.state = 'running' AND NEW.state <> 'running' AND NEW.limit_name IS NOT NULL)
EXECUTE FUNCTION jobs_limit_left_running();
