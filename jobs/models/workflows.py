"""Workflow runs, their nodes and signals (jobs/workflows/)."""

from django.db import models
from django.db.models.functions import Now

from ..ids import uuid7

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
