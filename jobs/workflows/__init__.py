"""Durable workflows on the job table: chains, groups, chords, signal waits, compensation.

    from jobs.workflows import chain, chord, group, step, wait_signal

    flow = chain(step(encode, video_id), chord(group(step(thumbs), step(transcribe)), step(publish)))
    run = flow.enqueue(name="video")        # in the caller's transaction
    run.refresh().status                    # running, compensating, succeeded, failed, cancelled

Steps are job rows the claim ignores ('waiting') until their inputs exist; the statement
that records a step's outcome advances the workflow in the same transaction (the trigger of
jobs/sql/functions/jobs_wf_*.sql). No coordinator process: the workers and their housekeeping (signal
timeouts) do it all.
"""

from .canvas import (
    Chain,
    Chord,
    Group,
    InvalidCanvas,
    Step,
    WaitSignal,
    chain,
    chord,
    group,
    step,
    wait_signal,
)
from .runs import NodeView, Workflow, WorkflowNotFound, cancel, enqueue, retry_step, send_signal

__all__ = [
    "Chain", "Chord", "Group", "InvalidCanvas", "NodeView", "Step", "WaitSignal", "Workflow",
    "WorkflowNotFound", "cancel", "chain", "chord", "enqueue", "group", "retry_step",
    "send_signal", "step", "wait_signal",
]  # fmt: skip
