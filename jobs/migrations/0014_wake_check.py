"""The enqueue statements' wake-up check as a function whose plan walks the queue's index.

The check asks whether a queue already has a due job (then its workers are busy or about
to claim, and no NOTIFY is needed). Written inline, the prepared statements planned it
from the table's statistics, and on a table analysed while empty (autovacuum after a
drained queue, or an ANALYZE after a TRUNCATE) that plan is a scan of the whole table and
a sort, kept until the next ANALYZE: every enqueue then read every queued row (one
connection's enqueue rate fell from about 2,000/s to about 300/s over 10,000 jobs). Inside
this function the plan cannot be a scan, whatever the statistics say; the function is
STABLE, so it reads the queue as the calling statement does (without the rows that
statement inserts).
"""

from django.db import migrations
from jobs.migrations import APP_LABEL

WAKE_CHECK = """
CREATE FUNCTION jobs_queue_has_due(queue text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobs_job j WHERE j.state = 'queued' AND j.queue_name = queue);
END
$$;
"""

DROP_WAKE_CHECK = "DROP FUNCTION jobs_queue_has_due(text);"


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0013_progress"),
    ]

    operations = [
        migrations.RunSQL(WAKE_CHECK, reverse_sql=DROP_WAKE_CHECK),
    ]
