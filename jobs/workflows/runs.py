"""Starting workflows, and the handle that reads one back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.db import connections, transaction
from django.tasks import task_backends

from ..backend import PostgresBackend
from ..conf import backend_alias
from ..exceptions import InvalidPayload, JobsError
from ..ids import uuid7
from ..models import Job, NodeKind, WorkflowNode
from ..models import Workflow as WorkflowRow
from ..ownership import owner_key
from ..payloads import dump_payload
from ..store import workflows as wf_store
from .canvas import InvalidCanvas, _Node
from .plan import Plan

FINISHED = ("succeeded", "failed", "cancelled")


class WorkflowNotFound(JobsError):
    """No workflow has that id."""


@dataclass(frozen=True)
class NodeView:
    """One node of a workflow as it stands: a step (``job_id`` set; ``state`` is its job's)
    or a chain, group, chord, signal wait or compensation."""

    id: uuid.UUID
    kind: str
    label: str
    state: str
    parent: uuid.UUID | None
    position: int
    result: Any
    error: str
    job_id: uuid.UUID | None = None
    attempt: int = 0
    # A compensation: the step it undoes.
    target: uuid.UUID | None = None
    finished_at: datetime | None = None
    # A signal wait in progress: when it times out.
    deadline: datetime | None = None


class Workflow:
    """A handle on one workflow: ``status`` is running, compensating (a step failed and the
    compensations run), succeeded, failed or cancelled; ``result`` the root's result."""

    def __init__(self, workflow_id: uuid.UUID | str, *, database: str = "default") -> None:
        self.id = uuid.UUID(str(workflow_id))
        self.database = database
        self.refresh()

    def refresh(self) -> Workflow:
        try:
            row = WorkflowRow.objects.using(self.database).get(id=self.id)
        except WorkflowRow.DoesNotExist:
            raise WorkflowNotFound(f"no workflow with id {self.id}") from None
        self.name = row.name
        self.status = row.status
        self.result = row.result
        self.error = row.error
        self.root = row.root
        self.created_at = row.created_at
        self.finished_at = row.finished_at
        self._nodes: list[NodeView] | None = None
        return self

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def nodes(self) -> list[NodeView]:
        """Every node and step, parents before children, siblings in order."""
        if self._nodes is None:
            self._nodes = _read_nodes(self.id, self.database)
        return self._nodes

    def steps(self, label: str | None = None) -> list[NodeView]:
        """The steps (job rows, compensations' included), optionally of one task path only."""
        return [n for n in self.nodes if n.kind == "step" and (label is None or n.label == label)]

    def compensations(self) -> list[NodeView]:
        """Compensation nodes in the order they ran (those that did not run last)."""
        found = [n for n in self.nodes if n.kind == NodeKind.COMPENSATION]
        return sorted(found, key=lambda n: (n.position == 0, n.position))

    def signal(self, name: str, payload: Any = None) -> str:
        return send_signal(self.id, name, payload, database=self.database)

    def cancel(self) -> str:
        return cancel(self.id, database=self.database)

    def __repr__(self) -> str:
        return f"<Workflow {self.id} {self.status}>"


def enqueue(canvas: _Node, *, name: str = "", owner: Any = None) -> Workflow:
    """Insert a workflow and start it, in the caller's transaction (invariant 1)."""
    backend = _backend_of(canvas)
    plan = Plan.build(canvas, backend)
    workflow_id = uuid7()
    with _cursor(backend.database) as cursor:
        wf_store.insert_workflow(
            cursor,
            workflow_id=workflow_id,
            name=name,
            owner=owner_key(owner) if owner is not None else "",
            root=plan.root,
            nodes=plan.nodes,
            steps=plan.steps,
        )
    return Workflow(workflow_id, database=backend.database)


def send_signal(
    workflow_id: uuid.UUID | str, name: str, payload: Any = None, *, database: str = "default"
) -> str:
    """Deliver ``payload`` to the workflow's wait for ``name`` (it becomes the wait's result
    and the workflow goes on), or keep it until the wait is reached. Returns 'delivered',
    'kept' or 'ignored' (the workflow is no longer running); WorkflowNotFound if there is no
    such workflow."""
    if not (isinstance(name, str) and 0 < len(name) <= 200):
        raise InvalidCanvas(f"a signal name is a string of 1 to 200 characters, not {name!r}")
    dump_payload("signal payload", [payload])
    if len(repr(payload)) > 64 * 1024:
        raise InvalidPayload("a signal payload is at most 64 KiB; pass ids, not data")
    with _cursor(database) as cursor:
        outcome = wf_store.send_signal(cursor, workflow_id=_uuid(workflow_id), name=name, payload=payload)
    if outcome is None:
        raise WorkflowNotFound(f"no workflow with id {workflow_id}")
    return outcome


def cancel(workflow_id: uuid.UUID | str, *, database: str = "default") -> str:
    """Cancel a running workflow: pending nodes and steps not yet running are cancelled
    (running ones finish; their outcome advances nothing). Returns the status afterwards."""
    with _cursor(database) as cursor:
        status = wf_store.cancel_workflow(cursor, workflow_id=_uuid(workflow_id))
    if status is None:
        raise WorkflowNotFound(f"no workflow with id {workflow_id}")
    return status


def retry_step(job_id: uuid.UUID | str, *, database: str = "default") -> str:
    """Run a failed (dead) step again with fresh attempts and let its workflow go on."""
    with _cursor(database) as cursor:
        return wf_store.retry_step(cursor, job_id=_uuid(job_id))


def _uuid(value: uuid.UUID | str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise WorkflowNotFound(f"no workflow with id {value}") from None


@contextmanager
def _cursor(database: str) -> Iterator[psycopg.Cursor[Any]]:
    # The caller's connection and transaction (a savepoint inside theirs), through psycopg
    # for COPY.
    with transaction.atomic(using=database):
        conn = connections[database]
        conn.ensure_connection()
        with psycopg.Cursor(conn.connection) as cursor:
            yield cursor


def _backend_of(canvas: _Node) -> PostgresBackend:
    from .canvas import Chain, Chord, Group, Step

    stack: list[_Node] = [canvas]
    while stack:
        node = stack.pop()
        if isinstance(node, Step):
            backend = node.task.get_backend()
            if not isinstance(backend, PostgresBackend):
                raise InvalidCanvas(f"workflows need the Postgres backend, not {type(backend).__name__}")
            return backend
        if isinstance(node, Chain | Group):
            stack.extend(node.nodes)
        elif isinstance(node, Chord):
            stack.extend((node.header, node.callback))
    backend = task_backends[backend_alias()]
    if not isinstance(backend, PostgresBackend):
        raise InvalidCanvas(f"workflows need the Postgres backend, not {type(backend).__name__}")
    return backend


def _read_nodes(workflow_id: uuid.UUID, database: str) -> list[NodeView]:
    nodes = list(WorkflowNode.objects.using(database).filter(workflow_id=workflow_id))
    ids = [n.id for n in nodes]
    jobs = Job.objects.using(database).filter(workflow_node__in=ids).only(
        "id", "task_path", "state", "workflow_node", "workflow_position", "result", "last_error", "attempt",
        "finished_at",
    )  # fmt: skip
    views = [
        NodeView(n.id, n.kind, n.label, n.state, n.parent, n.position, n.result, n.error, n.job_id,
                 target=n.target, finished_at=n.finished_at, deadline=n.deadline)
        for n in nodes
    ]  # fmt: skip
    for job in jobs:
        views.append(
            NodeView(job.id, "step", job.task_path, job.state, job.workflow_node, job.workflow_position or 0,
                     job.result, job.last_error, job.id, job.attempt, finished_at=job.finished_at)
        )  # fmt: skip
    children: dict[uuid.UUID | None, list[NodeView]] = {}
    for view in views:
        if view.kind != NodeKind.COMPENSATION:
            children.setdefault(view.parent, []).append(view)
    ordered: list[NodeView] = []
    stack = sorted(children.get(None, []), key=lambda v: v.position, reverse=True)
    while stack:
        view = stack.pop()
        ordered.append(view)
        stack.extend(sorted(children.get(view.id, []), key=lambda v: v.position, reverse=True))
    # Compensations and their jobs last.
    for view in views:
        if view.kind == NodeKind.COMPENSATION:
            ordered.append(view)
            ordered.extend(children.get(view.id, []))
    return ordered
