"""The job table and the worker registry.

Column meanings are documented here; the states and their transitions in ``states.py``.
Nothing outside ``jobs/store/`` writes a job's state.
"""

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F
from django.db.models.functions import Now

from .ids import uuid7
from .states import UNFINISHED, State

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
            # The reaper: running jobs by lease expiry. Running rows are few (what the
            # workers hold), so statements by claim token (release, settling a dead
            # executor) walk this one too rather than keep an index of their own, which
            # every claim would have to write.
            models.Index(
                fields=["lease_expires_at"],
                name="jobs_job_lease",
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
            # Pruning and the console's finished-job views.
            models.Index(
                fields=["state", "finished_at"],
                name="jobs_job_finished",
                condition=models.Q(state__in=FINISHED_STATES),
            ),
            # The console's list of finished jobs (what a long-running system is mostly made
            # of) by state, newest first: ids are time-ordered, so the primary key serves the
            # unfinished list, time ranges, and queue or task filters (walking back through
            # the newest rows). Only finished rows, so each job writes it once, when it
            # finishes; unfinished jobs are listed through the partial indexes above. One
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


class Limit(models.Model):
    """A rate and/or concurrency limit, applied by the claim across every worker.

    Named limits come from settings (``JOBS["LIMITS"]``) or from the console; a task's own
    (``@task(rate_limit=..., concurrency_limit=...)``) is named ``task:<its path>``. Values
    set in the console (``source`` "console") win over code and settings until reset.
    """

    name = models.TextField(primary_key=True)
    # Jobs started per second (NULL: no rate limit), and how many more may start at once
    # after an idle spell: over any second, at most rate + burst start.
    rate = models.FloatField(null=True, blank=True)
    burst = models.PositiveIntegerField(default=0)
    # Jobs running at once (NULL: no concurrency limit).
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    # A budget per limit key (.using(limit_key=...)) instead of one shared by all.
    per_key = models.BooleanField(default=False)
    source = models.TextField(default="code")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "jobs_limit"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(rate__isnull=True) | models.Q(rate__gt=0), name="jobs_limit_rate_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(concurrency__isnull=True) | models.Q(concurrency__gte=1),
                name="jobs_limit_concurrency_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class LimitState(models.Model):
    """Where one key of a limit stands, written only by the claim and by the trigger on job
    state changes (jobs/sql/functions/jobs_limit_left_running.sql), each under this row's lock:

    * ``tat``: GCRA's theoretical arrival time, advanced by each job that starts, so the
      starts themselves never exceed the rate (plus burst) over any second;
    * ``next_slot``: the first start time not yet set aside for a waiting job (jobs that
      cannot start now are given consecutive times from here, so they never collide);
    * ``running``: how many of its jobs run.
    """

    limit_name = models.TextField()
    limit_key = models.TextField()
    tat = models.DateTimeField(db_default=Now())
    next_slot = models.DateTimeField(db_default=Now())
    running = models.IntegerField(default=0, db_default=0)

    class Meta:
        db_table = "jobs_limit_state"
        constraints = [
            models.UniqueConstraint(fields=["limit_name", "limit_key"], name="jobs_limit_state_key"),
        ]

    def __str__(self) -> str:
        return f"{self.limit_name}:{self.limit_key}"


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


# --- Schedules (jobs/scheduler/) ---------------------------------------------------------

from typing import Any  # noqa: E402 - this section was added below the job models


def default_time_zone() -> str:
    """The zone of a schedule that names none: JOBS["SCHEDULER_TIME_ZONE"], else TIME_ZONE."""
    from django.conf import settings

    from .conf import jobs_settings

    return jobs_settings().SCHEDULER_TIME_ZONE or settings.TIME_ZONE


class Catchup(models.TextChoices):
    """What a schedule does with slots that passed while no scheduler was running.

    A slot at most JOBS["SCHEDULER_MISFIRE_GRACE"] seconds old is on time, not missed.
    """

    # Missed slots are dropped; only on-time slots fire.
    SKIP = "skip", "Skip missed slots"
    # Only the most recent due slot fires, however old.
    LATEST = "latest", "Run only the latest missed slot"
    # Every slot within catchup_window seconds fires, at most SCHEDULER_CATCHUP_LIMIT.
    ALL = "all", "Run all missed slots within the window"


class Overlap(models.TextChoices):
    ALLOW = "allow", "Allow overlapping runs"
    # A slot is recorded as skipped while the previous run's job is queued or running.
    SKIP = "skip", "Skip while the previous run is unfinished"


class ScheduleSource(models.TextChoices):
    DATABASE = "database", "Database (admin)"
    # Declared in code or settings (jobs.scheduler.declared) and synced at scheduler start.
    CODE = "code", "Code / settings"


class Schedule(models.Model):
    """A task that runs on a cron expression or a fixed interval (see jobs/scheduler/).

    ``revision`` changes on every save through the model, counted by the database, so no
    two saves share one; the scheduler writes only under the revision it read, so an edit
    made while it was busy is never overwritten.
    """

    name = models.TextField(unique=True)
    task_path = models.TextField(help_text="Dotted path of the task, e.g. 'jobs.tasks.prune_jobs'.")
    args = models.JSONField(default=list, blank=True, help_text="JSON list of positional arguments.")
    kwargs = models.JSONField(default=dict, blank=True, help_text="JSON object of keyword arguments.")
    cron = models.TextField(
        blank=True,
        default="",
        help_text="Cron expression read in the time zone: five fields, or six with seconds last. "
        "Leave empty for a fixed interval.",
    )
    interval_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Fixed interval in seconds (instead of cron), anchored on UTC."
    )
    time_zone = models.TextField(default=default_time_zone, help_text="IANA name, e.g. 'Asia/Jakarta'.")
    queue_name = models.TextField(default="default")
    priority = models.SmallIntegerField(default=0)
    enabled = models.BooleanField(default=True)
    catchup = models.TextField(choices=Catchup.choices, default=Catchup.SKIP)
    catchup_window = models.PositiveIntegerField(
        default=3600, help_text="Seconds looked back when catching up with 'all'."
    )
    overlap = models.TextField(choices=Overlap.choices, default=Overlap.ALLOW)
    source = models.TextField(choices=ScheduleSource.choices, default=ScheduleSource.DATABASE)
    # The next slot no scheduler has dealt with yet; NULL until one computes it.
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    revision = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    TIMING_FIELDS = ("cron", "interval_seconds", "time_zone", "enabled")

    class Meta:
        db_table = "jobs_schedule"
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(cron="") & models.Q(interval_seconds__isnull=False))
                | (~models.Q(cron="") & models.Q(interval_seconds__isnull=True)),
                name="jobs_schedule_cron_xor_interval",
            ),
            models.CheckConstraint(
                condition=models.Q(interval_seconds__isnull=True) | models.Q(interval_seconds__gte=1),
                name="jobs_schedule_interval_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(priority__gte=-100, priority__lte=100),
                name="jobs_schedule_priority_range",
            ),
            models.CheckConstraint(
                condition=models.Q(catchup__in=Catchup.values), name="jobs_schedule_catchup_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(overlap__in=Overlap.values), name="jobs_schedule_overlap_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def from_db(cls, db: Any, field_names: Any, values: Any, **kwargs: Any) -> "Schedule":
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._loaded_timing = instance._timing()
        return instance

    def _timing(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name, None) for name in self.TIMING_FIELDS)

    # The fields full_clean() was told to leave out, which clean()'s checks leave out too.
    _unchecked: frozenset[str] = frozenset()

    def full_clean(
        self, exclude: Any = None, validate_unique: bool = True, validate_constraints: bool = True
    ) -> None:
        self._unchecked = frozenset(exclude or ())
        try:
            super().full_clean(exclude, validate_unique, validate_constraints)
        finally:
            self._unchecked = frozenset()

    def clean(self) -> None:
        from .scheduler.validation import raise_for_errors

        # A form leaves out a field it could not read (args that are not JSON): the
        # schedule still holds the old value, which no check should report on.
        raise_for_errors(self, unchecked=self._unchecked)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, bump the revision, and recompute the next fire time if the timing changed
        (a re-enabled schedule starts from now, it does not catch up the disabled time).
        Running schedulers are woken by a notification sent when the transaction commits
        (jobs/scheduler/saving.py)."""
        from .scheduler.saving import next_fire_at, wake_schedulers

        if self._timing() != getattr(self, "_loaded_timing", None):
            self.next_fire_at = next_fire_at(self)
        if self._state.adding:
            self.revision = (self.revision or 0) + 1
        else:
            # Incremented in the UPDATE and read back by its RETURNING: two saves of one row at
            # once get two revisions (the second waits for the first's row lock, then adds
            # one to it). A row deleted meanwhile raises NotUpdated instead of coming back.
            self.revision = F("revision") + 1
            if not kwargs.get("force_insert"):
                kwargs["force_update"] = True
        update_fields = kwargs.get("update_fields")
        if update_fields is not None:
            kwargs["update_fields"] = {*update_fields, "revision", "next_fire_at", "updated_at"}
        super().save(*args, **kwargs)
        self._loaded_timing = self._timing()
        wake_schedulers(name=self.name, using=kwargs.get("using") or "default")


class FireOutcome(models.TextChoices):
    ENQUEUED = "enqueued", "Job enqueued"
    SKIPPED_OVERLAP = "skipped_overlap", "Skipped: previous run unfinished"


class FireRecord(models.Model):
    """One row per slot a schedule fired (or decided to skip), written in the same
    transaction as the job: the unique (schedule, slot, slot_seq) makes each slot fire once
    however many schedulers run. Manual runs ("run now") are recorded too, outside that
    constraint, so they never take a slot away from the schedule."""

    # Indexed by jobs_firerecord_recent (schedule, -id), which serves the cascade too.
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires", db_index=False)
    # The instant the slot fires at, and its place among the slots of the schedule at that
    # instant (jobs.scheduler.cron.Slot): 1 only for the local time right after a
    # spring-forward gap, which fires at the same instant as the gap's skipped times.
    slot = models.DateTimeField()
    slot_seq = models.PositiveSmallIntegerField(default=0, db_default=0)
    manual = models.BooleanField(default=False)
    outcome = models.TextField(choices=FireOutcome.choices, default=FireOutcome.ENQUEUED)
    # Not a foreign key: finished jobs are pruned on their own retention.
    job_id = models.UUIDField(null=True, blank=True)
    fired_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "jobs_firerecord"
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "slot", "slot_seq"],
                condition=models.Q(manual=False),
                name="jobs_firerecord_once_per_slot",
            ),
        ]
        indexes = [
            # The previous run of a schedule (overlap) and its history in the console.
            models.Index(fields=["schedule", "-id"], name="jobs_firerecord_recent"),
            # Pruning by age.
            models.Index(fields=["fired_at"], name="jobs_firerecord_fired_at"),
        ]

    def __str__(self) -> str:
        seq = f" #{self.slot_seq}" if self.slot_seq else ""
        return f"{self.schedule_id} @ {self.slot:%Y-%m-%d %H:%M:%S%z}{seq}"


# --- Workflows (jobs/workflows/) -----------------------------------------------------------


class WorkflowStatus(models.TextChoices):
    RUNNING = "running", "Running"
    # A step failed: the compensations of the steps that succeeded run, newest first.
    COMPENSATING = "compensating", "Compensating"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Workflow(models.Model):
    """One run of a canvas (chain, group, chord, signal waits). Its status is written only
    by the workflow functions (jobs/sql/functions/jobs_wf_*.sql), under this row's lock, which
    every advancement of the workflow takes first."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    name = models.TextField(blank=True, default="")
    status = models.TextField(choices=WorkflowStatus.choices, default=WorkflowStatus.RUNNING)
    root = models.UUIDField()
    # The root's result once it succeeded; why it failed otherwise.
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    owner = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs_workflow"
        indexes = [models.Index(fields=["-created_at"], name="jobs_workflow_recent")]

    def __str__(self) -> str:
        return f"{self.name or 'workflow'} [{self.status}] {self.id}"


class NodeKind(models.TextChoices):
    CHAIN = "chain", "Chain"
    GROUP = "group", "Group"
    CHORD = "chord", "Chord"
    SIGNAL = "signal", "Wait for a signal"
    # The compensation of one step (``target``), run as its own job when the workflow fails.
    COMPENSATION = "compensation", "Compensation"


class NodeState(models.TextChoices):
    PENDING = "pending", "Pending"
    # Reached: its steps are under way (a signal node: waiting for its signal).
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class WorkflowNode(models.Model):
    """A node of a workflow that is not itself a job: chains, groups, chords, signal waits
    and compensations. Steps are job rows (Job.workflow_node, Job.workflow_position) whose
    node is the chain, group or compensation they are in."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="nodes", db_index=False)
    parent = models.UUIDField(null=True, blank=True)
    # Place in the parent; for a compensation, its turn once the workflow failed.
    position = models.IntegerField(default=0)
    kind = models.TextField(choices=NodeKind.choices)
    state = models.TextField(choices=NodeState.choices, default=NodeState.PENDING)
    label = models.TextField(blank=True, default="")
    # How many children it has.
    size = models.IntegerField(default=0)
    # A chain: the position of the child under way. A group: members not finished yet,
    # decremented by each member's outcome under this row's lock (never a recount).
    remaining = models.IntegerField(default=0)
    failures = models.IntegerField(default=0)
    # A group: fail as soon as one member is dead (and cancel the pending ones), or only
    # once every member has finished.
    fail_fast = models.BooleanField(default=True)
    signal_name = models.TextField(blank=True, default="")
    timeout = models.FloatField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    # A compensation: its job, and the step job it undoes.
    job_id = models.UUIDField(null=True, blank=True)
    target = models.UUIDField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs_workflow_node"
        indexes = [
            models.Index(fields=["workflow", "position"], name="jobs_wfnode_workflow"),
            models.Index(fields=["parent", "position"], name="jobs_wfnode_parent"),
            # The housekeeper's signal timeouts.
            models.Index(
                fields=["deadline"],
                name="jobs_wfnode_deadline",
                condition=models.Q(kind="signal", state="running"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.label} [{self.state}]"


class WorkflowSignal(models.Model):
    """A signal sent to a workflow; kept until a wait for its name consumes it (``node``)."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="signals", db_index=False)
    name = models.TextField()
    payload = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField(db_default=Now())
    node = models.UUIDField(null=True, blank=True)

    class Meta:
        db_table = "jobs_workflow_signal"
        indexes = [models.Index(fields=["workflow", "name", "id"], name="jobs_wfsignal_lookup")]

    def __str__(self) -> str:
        return f"{self.name} -> {self.workflow_id}"


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
