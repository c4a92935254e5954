"""Pruning walks the console's index of finished jobs (state, id), and jobs_job_finished
(state, finished_at) goes.

Both indexes held every finished row, so every job that finished wrote two index entries
beside its new row version. The only reader of jobs_job_finished was pruning, which now
finds old rows by id: a job made after the cutoff cannot have finished before it, and ids
are time-ordered (jobs/store/operator.py says how rows made before that are reached).

Measured with ``scripts/bench`` (docs/explanation/hot-path.md): one index entry fewer per
job, and one index fewer that every insert and update of the table opens.

``DROP INDEX CONCURRENTLY`` waits for the transactions using the table, and blocks none:
enqueues, claims and outcomes go on. It cannot run inside a transaction, hence
``atomic = False``.
"""

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations
from jobs.migrations import APP_LABEL


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        (APP_LABEL, "0018_job_fillfactor"),
    ]

    operations = [
        RemoveIndexConcurrently(model_name="job", name="jobs_job_finished"),
    ]
