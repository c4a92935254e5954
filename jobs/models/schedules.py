"""Schedules and their fire records (jobs/scheduler/)."""

from typing import Any

from django.db import models
from django.db.models import F
from django.db.models.functions import Now

# --- Schedules (jobs/scheduler/) ---------------------------------------------------------


def default_time_zone() -> str:
    """The zone of a schedule that names none: JOBS["SCHEDULER_TIME_ZONE"], else TIME_ZONE."""
    from django.conf import settings

    from ..conf import jobs_settings

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
        from ..scheduler.validation import raise_for_errors

        # A form leaves out a field it could not read (args that are not JSON): the
        # schedule still holds the old value, which no check should report on.
        raise_for_errors(self, unchecked=self._unchecked)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, bump the revision, and recompute the next fire time if the timing changed
        (a re-enabled schedule starts from now, it does not catch up the disabled time).
        Running schedulers are woken by a notification sent when the transaction commits
        (jobs/scheduler/saving.py)."""
        from ..scheduler.saving import next_fire_at, wake_schedulers

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
