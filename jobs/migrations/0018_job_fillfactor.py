"""The job table's pages are filled to 70% by inserts, so that a row's next version finds
room on its own page.

Every transition of a job (claim, start mark, heartbeat, outcome) writes a new version of
its row. With full pages that version goes to another page: PostgreSQL logs an extra lock
record and the whole new tuple, and the old page keeps a dead tuple until VACUUM. With room
on the page, the new version stays beside the old one, only its changed middle is logged,
and page pruning reclaims the dead one on the next visit. (No update here is HOT: each
changes the state or the lease expiry, which indexes name.)

Measured with the layout prototype (``scripts/bench layout``, 3,000 no-op jobs, 500 with
one heartbeat; docs/explanation/hot-path.md): WAL per job 1,636 -> 1,521 bytes (-7%),
per heartbeat 531 -> 390 (-27%), and the table and its indexes on disk after the drain,
without VACUUM, 920 -> 838 bytes per job (-9%): the table grows less, not more.

``ALTER TABLE ... SET (fillfactor)`` takes a SHARE UPDATE EXCLUSIVE lock (enqueues, claims
and outcomes go on) and rewrites nothing: pages written from now on are filled to 70%, the
existing ones as VACUUM and updates reuse them.
"""

from django.db import migrations
from jobs.migrations import APP_LABEL


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0017_functions_from_files"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE jobs_job SET (fillfactor = 70)",
            reverse_sql="ALTER TABLE jobs_job RESET (fillfactor)",
        ),
    ]
