"""The worker registry: one row per runworker process."""

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now


class Worker(models.Model):
    """One row per live ``runworker`` process; rows of dead workers expire."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    hostname = models.TextField()
    pid = models.IntegerField()
    queues = models.TextField()
    concurrency = models.IntegerField()
    started_at = models.DateTimeField(db_default=Now())
    last_heartbeat_at = models.DateTimeField(db_default=Now())
    jobs_in_hand = models.IntegerField(default=0, db_default=0)
    # Claim tokens of its executor processes (Job.worker_id values).
    slot_tokens = ArrayField(models.UUIDField(), default=list, db_default="{}")

    class Meta:
        db_table = "jobs_worker"

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"
