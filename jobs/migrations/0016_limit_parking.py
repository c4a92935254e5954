"""Jobs waiting on a concurrency limit are parked: they cost nothing until a slot frees.

Until now such a job waited as 'scheduled' with a due time a minute on, so every minute
each waiting job came back to the queue and was decided again, a few per claim, ahead of
the work that could run (with 20,000 waiting, unrelated jobs waited about 31 s). Now a
claim that finds a key full parks all of the key's queued jobs in one step
(jobs/sql/claim.sql), and a parked job has no due time the promoter reads: the promoter's
index leaves parked jobs out, and it is a release that wakes them, one per slot freed
(the trigger below), with a safety net by key in the housekeeper
(jobs/store/limit_keys.py).

The trigger: when a job under a limit stops running (succeeded, failed, retried,
released, reaped, cancelled: any way out of 'running'), its key gives the slot back and,
if the key now has a slot free, its next parked job becomes claimable, in the same
transaction, keeping its place in the queue (its due time is left as it was). The key's
state row is locked first, as the claim locks it, so a claim that is deciding this key
either sees the slot free or has parked its jobs before this looks for one: no wake-up is
lost. Under a concurrency lowered below what runs, releases over the new limit wake
nothing.
"""

from django.db import migrations, models
from jobs.migrations import APP_LABEL

LIMIT_TRIGGER = """
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
"""

# The function as migration 0010_limits made it.
OLD_LIMIT_TRIGGER = """
CREATE OR REPLACE FUNCTION jobs_limit_left_running() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    woken_queue text;
BEGIN
    UPDATE jobs_limit_state
    SET running = greatest(running - 1, 0)
    WHERE limit_name = NEW.limit_name AND limit_key = NEW.limit_key;
    UPDATE jobs_job
    SET state = 'queued', run_at = statement_timestamp(), limit_wait = ''
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
"""


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0015_cancel_request"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="job",
            name="jobs_job_scheduled",
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("state", "scheduled"), models.Q(("limit_wait", "concurrency"), _negated=True)
                ),
                fields=["run_at"],
                name="jobs_job_scheduled",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("limit_name"),
                models.F("limit_key"),
                models.F("state"),
                condition=models.Q(
                    ("limit_name__isnull", False),
                    ("state__in", ["queued", "running", "scheduled", "waiting"]),
                ),
                name="jobs_job_limit_key",
            ),
        ),
        migrations.RunSQL(LIMIT_TRIGGER, reverse_sql=OLD_LIMIT_TRIGGER),
    ]
