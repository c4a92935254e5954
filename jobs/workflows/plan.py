"""A canvas laid out as rows: nodes for chains, groups, chords and waits; job rows for steps.

Every step is checked as it will be called: a step reached with an input (after another in
a chain, in a group after one, a chord's callback) must take one more first argument.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from ..backend import PostgresBackend
from ..ids import uuid7
from ..payloads import dump_payload
from ..store import NewJob
from ..store.workflows import NewNode
from .canvas import Chain, Chord, Group, InvalidCanvas, Step, WaitSignal, _Node

# Stands for the input a step will receive, when its arguments are checked at enqueue.
_INPUT = None


@dataclass
class Plan:
    backend: PostgresBackend
    root: uuid.UUID = field(default_factory=uuid7)
    nodes: list[NewNode] = field(default_factory=list)
    steps: list[NewJob] = field(default_factory=list)
    _templates: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, canvas: _Node, backend: PostgresBackend) -> Plan:
        plan = cls(backend)
        if not isinstance(canvas, Chain | Group | Chord):
            # Steps and waits always sit in a node: the root is a chain of one.
            canvas = Chain((canvas,))
        plan._add(canvas, parent=None, position=0, has_input=False, node_id=plan.root)
        return plan

    def _add(
        self, node: _Node, *, parent: uuid.UUID | None, position: int, has_input: bool,
        node_id: uuid.UUID | None = None,
    ) -> None:  # fmt: skip
        if isinstance(node, Step):
            if parent is None:
                raise InvalidCanvas("a step needs a chain, group or chord around it")
            job = self._job(node, parent=parent, position=position, has_input=has_input)
            self.steps.append(job)
            if node.compensate is not None:
                self._compensation(node.compensate, target=job.id)
            return
        node_id = node_id or uuid7()
        if isinstance(node, WaitSignal):
            self.nodes.append(NewNode(node_id, parent, position, "signal", node.name, signal_name=node.name,
                                      timeout=node.timeout))  # fmt: skip
        elif isinstance(node, Chain):
            self.nodes.append(NewNode(node_id, parent, position, "chain", "chain", size=len(node.nodes)))
            for index, child in enumerate(node.nodes):
                self._add(child, parent=node_id, position=index, has_input=has_input or index > 0)
        elif isinstance(node, Group):
            label = f"group of {len(node.nodes)}"
            self.nodes.append(
                NewNode(
                    node_id, parent, position, "group", label, size=len(node.nodes), fail_fast=node.fail_fast
                )
            )
            for index, child in enumerate(node.nodes):
                self._add(child, parent=node_id, position=index, has_input=has_input)
        elif isinstance(node, Chord):
            self.nodes.append(NewNode(node_id, parent, position, "chord", "chord", size=2))
            self._add(node.header, parent=node_id, position=0, has_input=has_input)
            self._add(node.callback, parent=node_id, position=1, has_input=True)
        else:
            raise InvalidCanvas(f"not a workflow node: {node!r}")

    def _compensation(self, compensate: Step, *, target: uuid.UUID) -> None:
        node_id = uuid7()
        job = self._job(compensate, parent=node_id, position=0, has_input=False)
        self.nodes.append(
            NewNode(node_id, None, 0, "compensation", f"undo: {compensate.label}", size=1, job_id=job.id,
                    target=target)
        )  # fmt: skip
        self.steps.append(job)
        if compensate.compensate is not None:
            raise InvalidCanvas("a compensation cannot have a compensation of its own")

    def _job(self, node: Step, *, parent: uuid.UUID, position: int, has_input: bool) -> NewJob:
        task = node.task
        if task.get_backend() is not self.backend:
            raise InvalidCanvas(f"every step of a workflow uses one backend; {task.name} does not")
        if getattr(task, "dedupe_key", None) is not None:
            raise InvalidCanvas(f"{task.name}: a workflow step cannot have a dedupe key")
        if task.run_after is not None:
            raise InvalidCanvas(
                f"{task.name}: a workflow step runs when its inputs exist, so it takes no run_after"
            )
        template = self._templates.get(id(task))
        if template is None:
            template = self._templates[id(task)] = self.backend._template(task)
        args = [_INPUT, *node.args] if has_input else list(node.args)
        job = self.backend._new_job(task, template, args, node.kwargs)
        if has_input:
            job = replace(job, args=dump_payload("args", list(node.args)))
        return replace(job, workflow_node=parent, workflow_position=position)
