"""Running jobs are indexed by the claim token that holds them (jobs_job_holder), no longer
by lease expiry (jobs_job_lease).

The heartbeat extends a running job's lease and the start mark records that its handler
began: both change only lease_expires_at and started_attempt. While an index was keyed on
lease_expires_at, each of them wrote a whole new version of the row and an entry in two
indexes. Now they change no indexed column, and on a page with room (migration 0018) they
are HOT updates. Every job that runs longer than a few milliseconds gets a start mark.

The reaper and the housekeeper's next lease expiry read the running rows (what the workers
hold) and sort them, in two functions (jobs/sql/functions/jobs_leases_expired.sql,
jobs_lease_next_expiry.sql) whose plans cannot become a scan of the whole table whatever
the statistics say; release and the settlement of a dead executor find theirs by token.

Measured with ``scripts/bench layout`` (docs/explanation/hot-path.md).

The new index is built and the old one dropped CONCURRENTLY: enqueues, claims and
outcomes go on. That cannot run inside a transaction, hence ``atomic = False``.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models
from jobs.migrations import APP_LABEL, function_loader

# The files this migration loads, with the digest (sha256, first 16 hex digits) of the
# version it was written for (migration 0017 says how).
FUNCTION_DIGESTS = {
    "jobs_lease_next_expiry": "48bfdc3eac81df24",
    "jobs_leases_expired": "23a91a5e7108b4d8",
}


def drop(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP FUNCTION jobs_lease_next_expiry(), jobs_leases_expired(timestamptz, integer)")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        (APP_LABEL, "0019_prune_by_console_index"),
    ]

    operations = [
        migrations.RunPython(function_loader(FUNCTION_DIGESTS), drop),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "running")), fields=["worker_id"], name="jobs_job_holder"
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="jobs_job_lease"),
    ]
