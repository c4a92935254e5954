"""Workflow writes: insert a workflow with its nodes and steps, signal, cancel, time out
waits, retry a failed step. The advancing itself happens in the database, in the trigger
and functions of jobs/sql/functions/jobs_wf_*.sql, in the transaction that records a step's outcome.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .rows import COPY_COLUMNS, NewJob, copy_values


@dataclass(frozen=True, slots=True)
class NewNode:
    """A row of jobs_workflow_node to insert (see jobs.models.WorkflowNode)."""

    id: uuid.UUID
    parent: uuid.UUID | None
    position: int
    kind: str
    label: str
    size: int = 0
    fail_fast: bool = True
    signal_name: str = ""
    timeout: float | None = None
    job_id: uuid.UUID | None = None
    target: uuid.UUID | None = None


_NODE_COLUMNS = (
    "id", "parent", "position", "kind", "label", "size", "fail_fast", "signal_name", "timeout", "job_id",
    "target",
)  # fmt: skip
_STEP_COLUMNS = (*COPY_COLUMNS, "state", "workflow_node", "workflow_position", "limit_name", "limit_key")


def insert_workflow(
    cursor: Any,
    *,
    workflow_id: uuid.UUID,
    name: str,
    owner: str,
    root: uuid.UUID,
    nodes: Sequence[NewNode],
    steps: Sequence[NewJob],
) -> None:
    """Insert a workflow, its nodes (one statement) and its steps (one COPY, all 'waiting'),
    then start its root: the first steps become 'queued' in the same transaction."""
    cursor.execute(
        "INSERT INTO jobs_workflow (id, name, status, root, error, owner, created_at) "
        "VALUES (%s, %s, 'running', %s, '', %s, statement_timestamp())",
        [workflow_id, name, root, owner],
    )
    cursor.execute(
        """
        INSERT INTO jobs_workflow_node (id, workflow_id, parent, position, kind, label, size, fail_fast,
                                        signal_name, timeout, job_id, target, state, remaining, failures,
                                        error)
        SELECT n.id, %(wf)s, n.parent, n.position, n.kind, n.label, n.size, n.fail_fast, n.signal_name,
               n.timeout, n.job_id, n.target, 'pending', 0, 0, ''
        FROM unnest(%(id)s::uuid[], %(parent)s::uuid[], %(position)s::int[], %(kind)s::text[],
                    %(label)s::text[], %(size)s::int[], %(fail_fast)s::bool[], %(signal_name)s::text[],
                    %(timeout)s::float8[], %(job_id)s::uuid[], %(target)s::uuid[])
             AS n(id, parent, position, kind, label, size, fail_fast, signal_name, timeout, job_id, target)
        """,
        {"wf": workflow_id, **{col: [getattr(node, col) for node in nodes] for col in _NODE_COLUMNS}},
    )
    if steps:
        with cursor.copy(f"COPY jobs_job ({', '.join(_STEP_COLUMNS)}) FROM STDIN") as copy:
            for job in steps:
                copy.write_row(
                    (*copy_values(job), "waiting", job.workflow_node, job.workflow_position, job.limit_name,
                     job.limit_key)
                )  # fmt: skip
        limited = sorted({(job.limit_name, job.limit_key) for job in steps if job.limit_name})
        if limited:
            # As insert.sql does: a key of its own only under a limit with a budget per key.
            cursor.execute(
                """
                WITH keyed AS (
                    UPDATE jobs_job j SET limit_key = ''
                    FROM jobs_limit l
                    WHERE j.workflow_node = ANY(%(nodes)s::uuid[]) AND l.name = j.limit_name
                      AND NOT l.per_key AND j.limit_key <> ''
                )
                INSERT INTO jobs_limit_state (limit_name, limit_key)
                SELECT DISTINCT t.name, CASE WHEN l.per_key THEN t.key ELSE '' END
                FROM unnest(%(names)s::text[], %(keys)s::text[]) AS t(name, key)
                JOIN jobs_limit l ON l.name = t.name
                ON CONFLICT (limit_name, limit_key) DO NOTHING
                """,
                {
                    "nodes": [node.id for node in nodes],
                    "names": [name for name, _ in limited],
                    "keys": [key for _, key in limited],
                },
            )
    cursor.execute("SELECT jobs_wf_start(%s, NULL, false)", [root])


def send_signal(cursor: Any, *, workflow_id: uuid.UUID | str, name: str, payload: Any) -> str | None:
    """Deliver a signal to the workflow's wait for ``name``, or keep it for when the wait is
    reached: 'delivered' or 'kept' ('ignored' when the workflow is no longer running: it is
    recorded all the same); None if there is no such workflow."""
    cursor.execute("SELECT jobs_wf_signal(%s, %s, %s::jsonb)", [workflow_id, name, json.dumps(payload)])
    row = cursor.fetchone()
    return row[0] if row else None


def cancel_workflow(cursor: Any, *, workflow_id: uuid.UUID | str) -> str | None:
    """Cancel a running workflow: its pending nodes and steps not yet running. Returns the
    workflow's status afterwards (None: no such workflow)."""
    cursor.execute("SELECT jobs_wf_cancel(%s)", [workflow_id])
    row = cursor.fetchone()
    return row[0] if row else None


def expire_signals(cursor: Any, *, now: datetime | None = None, limit: int = 500) -> int:
    """Fail the signal waits whose timeout passed (their workflows fail and compensate).
    Returns how many timed out."""
    cursor.execute("SELECT jobs_wf_expire_signals(%s, %s)", [now, limit])
    return int(cursor.fetchone()[0])


def retry_step(cursor: Any, *, job_id: uuid.UUID | str) -> str:
    """Run a dead step again with fresh attempts and reopen its workflow around it.
    Returns 'retried' or why not."""
    cursor.execute("SELECT jobs_wf_retry(%s)", [job_id])
    return str(cursor.fetchone()[0])


def prune_workflows(
    cursor: Any, *, retention: dict[str, float], now: datetime | None = None, batch: int = 1000
) -> int:
    """Delete finished workflows (their nodes and signals with them) older than the
    retention of their status (seconds). Their steps' job rows go by the jobs' own retention.
    Returns how many workflows were deleted."""
    deleted = 0
    for status, seconds in retention.items():
        while True:
            cursor.execute(
                """
                WITH old AS (
                    SELECT id FROM jobs_workflow
                    WHERE status = %(status)s
                      AND finished_at < coalesce(%(now)s, statement_timestamp())
                                        - %(seconds)s * interval '1 second'
                    LIMIT %(batch)s
                ), nodes AS (
                    DELETE FROM jobs_workflow_node WHERE workflow_id IN (SELECT id FROM old)
                ), signals AS (
                    DELETE FROM jobs_workflow_signal WHERE workflow_id IN (SELECT id FROM old)
                )
                DELETE FROM jobs_workflow WHERE id IN (SELECT id FROM old)
                """,
                {"status": status, "now": now, "seconds": seconds, "batch": batch},
            )
            deleted += cursor.rowcount
            if cursor.rowcount < batch:
                break
    return deleted
