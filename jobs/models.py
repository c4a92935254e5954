"""The job table and the worker registry.

Column meanings are documented here; the states and their transitions in ``states.py``.
Nothing outside ``store.py`` writes a job's state.
"""

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from .states import State

UNFINISHED_STATES = [State.QUEUED, State.RUNNING]
FINISHED_STATES = [State.SUCCEEDED, State.DEAD, State.CANCELLED]


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Dotted path of the django.tasks Task object, e.g. "accounts.tasks.send_verification".
    task_path = models.TextField()
    queue_name = models.TextField(default="default")
    # Higher runs first, as in django.tasks (-100..100).
    priority = models.SmallIntegerField(default=0)
    state = models.TextField(choices=State.choices, default=State.QUEUED, db_default=State.QUEUED)
    # The payload: JSON only, ids rather than objects or secrets.
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    # Earliest time the job may be claimed: delays, backoff and snoozes move it.
    run_at = models.DateTimeField(default=None, db_default=Now())
    # Attempts used so far; incremented by the claim, so a job that kills its worker
    # still uses one up.
    attempt = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField()
    # Hard time limit for one attempt, in seconds (NULL: none).
    timeout = models.FloatField(null=True, blank=True)
    # Length of one lease, in seconds; the heartbeat extends it while the handler runs.
    lease_seconds = models.FloatField()
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Claim token of the worker process that holds the job while it is running.
    worker_id = models.UUIDField(null=True, blank=True)
    # One claim token per attempt, oldest first (django.tasks' TaskResult.worker_ids).
    worker_ids = ArrayField(models.UUIDField(), default=list, db_default="{}")
    created_at = models.DateTimeField(default=None, db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    # One entry per failed attempt: attempt, at, worker, exception, message, traceback.
    errors = models.JSONField(default=list, db_default=models.Value([], models.JSONField()))
    last_error = models.TextField(blank=True, default="", db_default="")
    # While a job with this key is unfinished (and, with a window, before dedupe_until)
    # enqueueing the same key returns this job instead of a new one.
    dedupe_key = models.TextField(null=True, blank=True)
    dedupe_until = models.DateTimeField(null=True, blank=True)
    # Set when the window passed and a newer job took the key over.
    dedupe_lapsed = models.BooleanField(default=False, db_default=False)
    trace_id = models.TextField(blank=True, default="", db_default="")

    class Meta:
        db_table = "jobs_job"
        constraints = [
            models.CheckConstraint(condition=models.Q(state__in=State.values), name="jobs_job_state_valid"),
            models.CheckConstraint(
                condition=models.Q(priority__gte=-100, priority__lte=100),
                name="jobs_job_priority_range",
            ),
            models.CheckConstraint(
                condition=~models.Q(state=State.RUNNING)
                | models.Q(worker_id__isnull=False, lease_expires_at__isnull=False),
                name="jobs_job_running_has_lease",
            ),
            models.CheckConstraint(
                condition=models.Q(max_attempts__gte=1), name="jobs_job_max_attempts_positive"
            ),
            models.UniqueConstraint(
                fields=["dedupe_key"],
                condition=models.Q(
                    dedupe_key__isnull=False,
                    dedupe_lapsed=False,
                    state__in=UNFINISHED_STATES,
                ),
                name="jobs_job_dedupe",
            ),
        ]
        indexes = [
            # Serves the claim query (jobs/sql/claim.sql) and nothing else.
            models.Index(
                "queue_name",
                models.F("priority").desc(),
                "run_at",
                name="jobs_job_claimable",
                condition=models.Q(state=State.QUEUED),
            ),
            # The reaper: running jobs by lease expiry.
            models.Index(
                fields=["lease_expires_at"],
                name="jobs_job_lease",
                condition=models.Q(state=State.RUNNING),
            ),
            # The heartbeat: running jobs by claim token.
            models.Index(
                fields=["worker_id"],
                name="jobs_job_worker",
                condition=models.Q(state=State.RUNNING),
            ),
            # Pruning and the console's finished-job views.
            models.Index(
                fields=["state", "finished_at"],
                name="jobs_job_finished",
                condition=models.Q(state__in=FINISHED_STATES),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_path} [{self.state}] {self.id}"


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
