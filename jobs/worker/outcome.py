"""What one attempt came to, as the worker hands it to ``store.record_outcomes``.

A TypedDict rather than a class: an outcome travels as JSON in a batch (one statement for
many, sql/record_outcomes.sql), so it is built as the dict it is sent as, at no cost per
job beyond the literal.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, NotRequired, TypedDict

from ..exceptions import BadReturnValue

# "queued" is a retry or snooze (with ``delay``, run later as 'scheduled').
OutcomeState = Literal["succeeded", "queued", "dead"]


class Outcome(TypedDict):
    """One attempt's result, fenced on (``id``, ``attempt``) when it is written."""

    # The id stays a UUID (or its text, from a settlement): it becomes text once, in the
    # batch's JSON.
    id: uuid.UUID | str
    attempt: int
    # Whether the job is a workflow step: only a batch that may hold one locks workflows
    # before its job rows. Missing (an outcome from outside the worker) counts as maybe.
    in_workflow: NotRequired[bool]
    state: OutcomeState
    # The handler's return value, checked storable (succeeded).
    result: NotRequired[Any]
    # Seconds until the job is due again (queued).
    delay: NotRequired[float]
    # 1: the attempt is given back (a snooze, a task not importable here yet).
    refund: NotRequired[int]
    # payloads.error_record: exception, message, traceback.
    error: NotRequired[dict[str, Any]]
    # The attempt's last progress report (jobs/progress.py), written with it.
    progress: NotRequired[dict[str, Any]]


def dead(
    job_id: uuid.UUID | str, attempt: int, error: dict[str, Any], *, in_workflow: bool = True
) -> Outcome:
    """The outcome of an attempt that ends the job in the dead-letter state with ``error``."""
    return {"id": job_id, "attempt": attempt, "in_workflow": in_workflow, "state": "dead", "error": error}


def unstorable(outcome: Outcome, exc: Exception) -> Outcome:
    """What is written instead of an outcome the database refused (a result it cannot
    hold): the job dead, with why, rather than a batch that fails forever."""
    error = {
        "exception": f"{BadReturnValue.__module__}.{BadReturnValue.__qualname__}",
        "message": f"the outcome of this attempt cannot be stored: {str(exc).strip()}",
        "traceback": "",
    }
    return dead(outcome["id"], outcome["attempt"], error, in_workflow=outcome.get("in_workflow", True))
