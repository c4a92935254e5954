"""The reaper's candidates are estimated at ten rows, not a thousand.

jobs_leases_expired (jobs/sql/functions/jobs_leases_expired.sql) returns the running jobs
whose lease expired: almost always none. PostgreSQL guesses a thousand rows for a function
it knows nothing about, and the reaper joins those rows back to jobs_job to lock them. Where
the statistics counted every job running (a table analysed during a busy fleet's burst),
a thousand lookups by primary key looked dearer than one hash join, so each reaper tick of
each worker read the whole table (tests/integration/test_claim.py). ``ROWS 10`` keeps the
lookups by primary key whatever the statistics say.
"""

from django.db import migrations
from jobs.migrations import APP_LABEL, function_loader

# The files this migration loads, with the digest (sha256, first 16 hex digits) of the
# version it was written for (migration 0017 says how).
FUNCTION_DIGESTS = {
    "jobs_leases_expired": "f12d6b6779d98674",
}


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0021_job_column_order"),
    ]

    operations = [
        migrations.RunPython(function_loader(FUNCTION_DIGESTS), migrations.RunPython.noop),
        # Backwards: the estimate PostgreSQL gives a function that states none.
        migrations.RunSQL(
            migrations.RunSQL.noop,
            reverse_sql="ALTER FUNCTION jobs_leases_expired(timestamptz, integer) ROWS 1000",
        ),
    ]
