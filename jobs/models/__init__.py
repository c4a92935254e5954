"""The engine's tables, one module per subsystem: jobs (and paused queues), workers, limits,
schedules, workflows. Every model is importable from ``jobs.models`` as before."""

from .jobs import FINISHED_STATES, UNFINISHED_STATES, Job, PausedQueue
from .limits import Limit, LimitState
from .schedules import (
    Catchup,
    FireOutcome,
    FireRecord,
    Overlap,
    Schedule,
    ScheduleSource,
    default_time_zone,
)
from .workers import Worker
from .workflows import NodeKind, NodeState, Workflow, WorkflowNode, WorkflowSignal, WorkflowStatus

__all__ = [
    "FINISHED_STATES", "UNFINISHED_STATES", "Catchup", "FireOutcome", "FireRecord", "Job", "Limit",
    "LimitState", "NodeKind", "NodeState", "Overlap", "PausedQueue", "Schedule", "ScheduleSource",
    "Worker", "Workflow", "WorkflowNode", "WorkflowSignal", "WorkflowStatus", "default_time_zone",
]  # fmt: skip
