"""The database's functions and triggers from their current source in jobs/sql/functions/.

Until now each function's source lived only in the migration that last redefined it (0010,
0011, 0012, 0014, 0015, 0016), so a reader had to find the latest one. The files now hold
today's definitions, identical to what those migrations left; this migration loads them
(CREATE OR REPLACE), so a database migrated from scratch and one migrated before agree
with the files. The earlier migrations keep their historical SQL so they replay as they
did. A later change to a file comes with its own migration that loads it again
(jobs.store.statements.load_functions) and records the file's new digest in its own
FUNCTION_DIGESTS; tests/integration/test_sql_functions.py holds each file to the digest of
the latest migration that loaded it.
"""

from django.db import migrations
from jobs.migrations import APP_LABEL, function_loader

# The files this migration loads, with the digest (sha256, first 16 hex digits) of the
# version it was written for.
FUNCTION_DIGESTS = {
    "jobs_count_deleted": "78dfe6e43b401ade",
    "jobs_count_inserted": "048ddbb656d1155a",
    "jobs_count_truncated": "f2aa124026fb1766",
    "jobs_count_updated": "46c01d7ea89feb2c",
    "jobs_limit_left_running": "88666f2deeead742",
    "jobs_queue_has_due": "76b2e2247d768dad",
    "jobs_wf_cancel": "5dda6f35d5b1e1d2",
    "jobs_wf_cancel_below": "7a57d5d240174e8d",
    "jobs_wf_child_done": "d8d00e4bd698d7e8",
    "jobs_wf_compensate_next": "e91b96432bf02d15",
    "jobs_wf_done": "e6866c39bfe98aaf",
    "jobs_wf_drop_compensations": "36e394522f7d7e7d",
    "jobs_wf_expire_signals": "ea401df51019a959",
    "jobs_wf_finish": "2cfbc56c7b293651",
    "jobs_wf_job_finished": "74e189bde993d45a",
    "jobs_wf_queue_steps": "edc9d683fd8f2d9f",
    "jobs_wf_results": "9f4e6d23f75380e4",
    "jobs_wf_retry": "b35d6794da006c21",
    "jobs_wf_rewait": "3fea2a7f188067f1",
    "jobs_wf_signal": "9886f3d353c3686d",
    "jobs_wf_start": "e2760456004026b8",
    "jobs_wf_start_child": "4afc796686d56d3c",
}


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0016_limit_parking"),
    ]

    # Backwards: nothing to undo, the files hold what 0016 left.
    operations = [migrations.RunPython(function_loader(FUNCTION_DIGESTS), migrations.RunPython.noop)]
