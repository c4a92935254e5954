"""The states of a job and the transitions between them.

Every transition is one guarded UPDATE in ``jobs/store/``; the table's CHECK constraint
holds the state names, and the partial index ``jobs_job_claimable`` covers exactly the
claimable state. Django's task API sees four statuses; ``TASK_STATUS`` maps ours onto them.
"""

from django.db import models
from django.tasks import TaskResultStatus


class State(models.TextChoices):
    # A workflow step whose inputs do not exist yet (jobs/workflows/): the previous step of
    # its chain, or every member of the group before it, has not succeeded. The claim never
    # looks at these rows; the statement that records the last input's success makes the
    # step 'queued' (or 'cancelled' when the workflow fails or is cancelled), in the same
    # transaction (jobs/sql/functions/jobs_wf_job_finished.sql). A compensation waits here
    # until its workflow fails.
    WAITING = "waiting", "Waiting (workflow)"
    # Waiting for its time: a delayed job, or one waiting for its next retry or the end of
    # a snooze (``run_at`` in the future). The claim never looks at these rows, so however
    # many there are, claiming due work costs the same; every worker's housekeeping moves
    # the ones that came due to ``queued`` (jobs/sql/promote.sql) and wakes the workers.
    SCHEDULED = "scheduled", "Scheduled"
    # Due and waiting for a worker. The only state the claim query looks at.
    QUEUED = "queued", "Queued"
    # Claimed by a worker process under a lease (``lease_expires_at``). ``attempt`` was
    # incremented by the claim. Only the claim's owner (``worker_id`` and ``attempt``) may
    # record its outcome; once the lease lapses the reaper may take the job back. An
    # operator's cancel does not end it: it sets ``cancel_requested_at`` and the attempt's
    # outcome (or the reaper) makes the job 'cancelled', unless it succeeded.
    RUNNING = "running", "Running"
    # Finished: the handler returned, and its JSON return value is in ``result``.
    SUCCEEDED = "succeeded", "Succeeded"
    # The dead-letter state: attempts used up, a non-retryable error, a discard from the
    # handler, or a row that cannot run at all (unknown task, bad payload). Kept with its
    # error history until pruned; an operator may replay it.
    DEAD = "dead", "Dead"
    # Withdrawn by an operator or by code before it ran to completion: before it started, or
    # (a cancel requested while it ran) once its attempt ended without succeeding.
    CANCELLED = "cancelled", "Cancelled"
    # Its not-started deadline (``expires_at``) passed before a worker could start it: it
    # never ran, and never will (an OTP that would arrive too late). Set by the claim.
    EXPIRED = "expired", "Expired"


FINISHED = frozenset({State.SUCCEEDED, State.DEAD, State.CANCELLED, State.EXPIRED})
UNFINISHED = frozenset({State.WAITING, State.SCHEDULED, State.QUEUED, State.RUNNING})

# (from, to) pairs that jobs/store/ performs. Anything else is a bug.
TRANSITIONS: frozenset[tuple[State, State]] = frozenset(
    {
        (State.WAITING, State.QUEUED),  # a workflow step's inputs exist (workflow trigger)
        (State.WAITING, State.CANCELLED),  # its workflow failed or was cancelled first
        (State.CANCELLED, State.WAITING),  # its workflow reopened by retrying a failed step
        (State.SCHEDULED, State.QUEUED),  # came due (promote), or run now (operator)
        (State.SCHEDULED, State.CANCELLED),  # cancel before it ran
        (State.SCHEDULED, State.DEAD),  # discarded before it ran (operator)
        (State.QUEUED, State.RUNNING),  # claim
        (State.QUEUED, State.EXPIRED),  # claimed after its not-started deadline
        (State.QUEUED, State.CANCELLED),  # cancel before it ran
        (State.QUEUED, State.DEAD),  # discarded before it ran (operator)
        (State.RUNNING, State.SUCCEEDED),  # complete
        (State.RUNNING, State.SCHEDULED),  # retry or snooze after a delay, reaper's backoff
        (State.RUNNING, State.QUEUED),  # retry at once, release, unstarted job given back
        (State.RUNNING, State.DEAD),  # last attempt failed, non-retryable, reaper
        (State.RUNNING, State.CANCELLED),  # its attempt ended after a cancel was requested
        (State.DEAD, State.QUEUED),  # replay
        (State.CANCELLED, State.QUEUED),  # replay
        (State.EXPIRED, State.QUEUED),  # replay (the deadline is lifted)
    }
)

TASK_STATUS = {
    State.WAITING: TaskResultStatus.READY,
    State.SCHEDULED: TaskResultStatus.READY,
    State.QUEUED: TaskResultStatus.READY,
    State.RUNNING: TaskResultStatus.RUNNING,
    State.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    State.DEAD: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
    State.EXPIRED: TaskResultStatus.FAILED,
}
