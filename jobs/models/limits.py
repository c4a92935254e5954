"""Rate and concurrency limits, and each key's state (jobs/limits.py, jobs/sql/claim.sql)."""

from django.db import models
from django.db.models.functions import Now


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
