"""The job table (and the console's paused queues).

Column meanings are documented here; the states and their transitions in ``jobs/states.py``.
Nothing outside ``jobs/store/`` writes a job's state.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from ..ids import uuid7
from ..states import UNFINISHED, State

UNFINISHED_STATES = [State.SCHEDULED, State.QUEUED, State.RUNNING]
FINISHED_STATES = [State.SUCCEEDED, State.DEAD, State.CANCELLED, State.EXPIRED]


class Job(models.Model):
    # Time-ordered (jobs.ids.uuid7): among jobs of equal priority and due time, the claim
    # takes the oldest id first.
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
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
    # The attempt whose handler has begun (the worker marks it as it starts, before the
    # task is even imported). A running row with started_attempt < attempt was claimed but
    # never started: a lost worker's reaper gives it back without using the attempt.
    started_attempt = models.IntegerField(default=0, db_default=0)
    # How often the reaper gave the job back unstarted. A job given back before has its
    # start marked before its handler runs, so one that takes its whole worker down with it
    # cannot loop on refunds.
    handbacks = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField()
    # Hard time limit for one attempt, in seconds (NULL: the worker's JOBS_DEFAULT_TIMEOUT).
    timeout = models.FloatField(null=True, blank=True)
    # Length of one lease, in seconds (NULL: the worker's JOBS_LEASE_SECONDS); the
    # heartbeat extends it while the handler runs.
    lease_seconds = models.FloatField(null=True, blank=True)
    # The task's retry backoff (seconds; NULL: the worker's JOBS_BACKOFF_*), kept on the row
    # so that the reaper, which runs no task code, retries a lost job on the task's terms.
    backoff_base = models.FloatField(null=True, blank=True)
    backoff_cap = models.FloatField(null=True, blank=True)
    # The rest of the retry policy and the soft time limit, as @task or .using() set them
    # (NULL/empty: the task's defaults), so every path (executor, supervisor, reaper) applies
    # the job's own options.
    jitter = models.BooleanField(null=True, blank=True)
    soft_timeout = models.FloatField(null=True, blank=True)
    # Dotted paths of exception classes that end the job dead instead of retrying.
    non_retryable = ArrayField(models.TextField(), default=list, db_default="{}", blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When an operator cancelled the job while it ran (jobs/store/operator.py): it stays
    # 'running' under its lease until its attempt ends, and then ends 'cancelled' unless it
    # succeeded (jobs/sql/record_outcomes.sql, reap.sql). Set only on running jobs, and kept
    # on one that succeeded all the same.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Claim token of the worker process that holds the job while it is running.
    worker_id = models.UUIDField(null=True, blank=True)
    # One claim token per attempt, oldest first (django.tasks' TaskResult.worker_ids).
    worker_ids = ArrayField(models.UUIDField(), default=list, db_default="{}")
    created_at = models.DateTimeField(default=None, db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    # What a running handler last reported (jobs/progress.py): {"done", "total", "message",
    # "updated_at"}; NULL for jobs that never report. The last attempt's report stays.
    progress = models.JSONField(null=True, blank=True)
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
    # Whose job this is, as an opaque key (jobs.ownership.owner_key: "auth.user:42"); empty
    # for the system's own jobs. The status API shows a job to its owner and to staff, and
    # its bare status to anyone holding the id when ``public`` is set.
    owner = models.TextField(blank=True, default="", db_default="")
    public = models.BooleanField(default=False, db_default=False)
    # A not-started deadline: a job that would start after it ends expired without running.
    expires_at = models.DateTimeField(null=True, blank=True)
    # The rate/concurrency limit the job is under (jobs/limits.py), and its key for limits
    # with a budget per key ("" for one shared budget). A job the claim could not start
    # within its limit waits as 'scheduled' without using an attempt: ``limit_wait`` says
    # why ("rate": until the start time the limit set aside for it, ``limit_reserved``;
    # "concurrency": until a running job of its key finishes).
    limit_name = models.TextField(null=True, blank=True)
    limit_key = models.TextField(blank=True, default="", db_default="")
    limit_reserved = models.BooleanField(default=False, db_default=False)
    limit_wait = models.TextField(blank=True, default="", db_default="")
    # A workflow step (jobs/workflows/): the chain, group or compensation node it belongs
    # to and its place there. NULL for plain jobs, which the workflow trigger skips.
    workflow_node = models.UUIDField(null=True, blank=True)
    workflow_position = models.IntegerField(null=True, blank=True)
    # The job's replays, oldest first (jobs/store/operator.py): {"at", "by", "was" (the state
    # it left), "attempt" (attempts used then), "errors" (entries of ``errors`` before it)},
    # and "args", "kwargs" when an operator edited the arguments: the payload replaced. The
    # console numbers the runs across replays from these. Rows replayed before replays were
    # recorded hold payload edits only.
    edits = models.JSONField(default=list, db_default=models.Value([], models.JSONField()))

    class Meta:
        db_table = "jobs_job"
        # The console's actions, one permission each (view and delete are Django's own).
        permissions = [
            ("replay_job", "Can replay dead, cancelled or expired jobs"),
            ("edit_replay_job", "Can edit a dead job's arguments and replay it"),
            ("cancel_job", "Can cancel jobs"),
            ("run_job_now", "Can run scheduled jobs now"),
            ("pause_queue", "Can pause and resume queues"),
        ]
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
            # Parked on a concurrency limit: the next one of a key, woken when a running job
            # of that key finishes (jobs/sql/functions/jobs_limit_left_running.sql).
            models.Index(
                "limit_name",
                "limit_key",
                models.F("priority").desc(),
                "id",
                name="jobs_job_limit_waiting",
                condition=models.Q(state=State.SCHEDULED, limit_wait="concurrency"),
            ),
            # The promoter: scheduled jobs by due time (jobs/sql/promote.sql). Jobs parked on
            # a concurrency limit are not due at any time (a release wakes them), so they
            # are left out: the promoter never reads them.
            models.Index(
                fields=["run_at"],
                name="jobs_job_scheduled",
                condition=models.Q(state=State.SCHEDULED) & ~models.Q(limit_wait="concurrency"),
            ),
            # Unfinished jobs under a limit by key: the claim parks a full key's queued jobs
            # in one step, and a key's state row is dropped once no unfinished job names it
            # (jobs/store/limit_keys.py).
            models.Index(
                "limit_name",
                "limit_key",
                "state",
                name="jobs_job_limit_key",
                condition=models.Q(limit_name__isnull=False, state__in=sorted(UNFINISHED)),
            ),
            # Serves the claim query (jobs/sql/claim.sql) and nothing else.
            models.Index(
                "queue_name",
                models.F("priority").desc(),
                "run_at",
                "id",
                name="jobs_job_claimable",
                condition=models.Q(state=State.QUEUED),
            ),
            # Running jobs by the claim token that holds them: release, settling a dead
            # executor. Running rows are few (what the workers hold), so the reaper and the
            # housekeeper's next lease expiry read them all here and sort them, rather than
            # key an index on the lease: the heartbeat and the start mark, which change only
            # lease_expires_at and started_attempt, then change no indexed column and can be
            # HOT updates (migration 0020).
            models.Index(
                fields=["worker_id"],
                name="jobs_job_holder",
                condition=models.Q(state=State.RUNNING),
            ),
            # A user's own jobs (reports, imports, the email API's clients).
            models.Index(
                fields=["owner", "-created_at"],
                name="jobs_job_owner",
                condition=~models.Q(owner=""),
            ),
            # A workflow node's steps, in order: starting a group, gathering its results.
            models.Index(
                "workflow_node",
                "workflow_position",
                name="jobs_job_workflow",
                condition=models.Q(workflow_node__isnull=False),
            ),
            # The console's list of finished jobs (what a long-running system is mostly made
            # of) by state, newest first: ids are time-ordered, so the primary key serves the
            # unfinished list, time ranges, and queue or task filters (walking back through
            # the newest rows). Only finished rows, so each job writes it once, when it
            # finishes; unfinished jobs are listed through the partial indexes above. Pruning
            # walks it too, its ids bounded by the cutoff (jobs/store/operator.py). One
            # index: each one more would cost every finishing job another index insert.
            models.Index(
                fields=["state", "id"],
                name="jobs_job_console_state",
                condition=models.Q(state__in=FINISHED_STATES),
            ),
            # The console's "retrying" filter: only rows waiting after a failed attempt, so
            # a job that succeeds first time never writes it.
            models.Index(
                fields=["id"],
                name="jobs_job_console_retrying",
                condition=models.Q(state__in=[State.QUEUED, State.SCHEDULED], attempt__gt=0),
            ),
            # The console's search indexes (trace id, dedupe key, error text by trigram) are
            # expression or operator-class indexes made in migration 0011_console.
        ]

    def __str__(self) -> str:
        return f"{self.task_path} [{self.state}] {self.id}"


# --- The console (jobs/console/, jobs/stats.py) ------------------------------------------


class PausedQueue(models.Model):
    """A queue no worker claims from while its row exists (jobs/sql/claim.sql leaves it
    out); its jobs keep their places and are promoted as they come due."""

    name = models.TextField(primary_key=True)
    paused_at = models.DateTimeField(db_default=Now())
    paused_by = models.TextField(blank=True, default="")

    class Meta:
        db_table = "jobs_paused_queue"

    def __str__(self) -> str:
        return self.name


# The console's aggregates (tables jobs_queue_count and jobs_throughput) are kept by triggers
# and read by jobs/stats.py in SQL; they are made in migration 0011_console, without a
# primary key, so that appending to them costs the hot statements no index insert.
