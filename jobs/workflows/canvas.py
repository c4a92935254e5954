"""The canvas: steps, chains, groups, chords and signal waits, nested freely.

Nothing here touches the database; ``.enqueue()`` hands the canvas to ``runs.enqueue``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from django.tasks import Task

from ..exceptions import JobsError

if TYPE_CHECKING:
    from .runs import Workflow


class InvalidCanvas(JobsError):
    """A canvas that cannot run: not a node, an empty signal name, a bad timeout."""


class _Node:
    def enqueue(self, *, name: str = "", owner: Any = None) -> Workflow:
        """Insert the workflow in the caller's transaction and start it; its first steps are
        claimable once the transaction commits."""
        from .runs import enqueue

        return enqueue(self, name=name, owner=owner)


@dataclass(frozen=True)
class Step(_Node):
    """One task call. Reached with an input (the previous step's result, or a group's list
    of results), it gets that input as its first argument."""

    task: Task
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Runs, as its own job, if the workflow fails after this step succeeded.
    compensate: Step | None = None

    def using(self, **options: Any) -> Step:
        """The task's options for this step (``task.using(...)``: queue, priority, retries...)."""
        return replace(self, task=self.task.using(**options))

    @property
    def label(self) -> str:
        return self.task.name


@dataclass(frozen=True)
class Chain(_Node):
    """Each node's result is the next one's first argument; its result is the last one's."""

    nodes: tuple[_Node, ...]


@dataclass(frozen=True)
class Group(_Node):
    """Nodes run in parallel; the result is the list of their results, in order. With
    ``fail_fast`` (default) the group fails as soon as one member is dead and its pending
    members are cancelled; otherwise it waits for all, then fails if any did."""

    nodes: tuple[_Node, ...]
    fail_fast: bool = True


@dataclass(frozen=True)
class Chord(_Node):
    """A group, then a callback that gets the list of the group's results."""

    header: Group
    callback: _Node


@dataclass(frozen=True)
class WaitSignal(_Node):
    """The workflow pauses here (no job, no worker) until ``send_signal(workflow, name,
    payload)`` delivers a payload, which becomes this node's result, or ``timeout`` seconds
    pass and the node fails. A signal sent before the wait is reached is kept for it."""

    name: str
    timeout: float | None = None


Node = _Node


def step(task: Task, *args: Any, compensate: Step | None = None, **kwargs: Any) -> Step:
    if not isinstance(task, Task):
        raise InvalidCanvas(f"step() takes a task (decorate the function with @task), not {task!r}")
    if compensate is not None and not isinstance(compensate, Step):
        raise InvalidCanvas("compensate= takes a step(...)")
    return Step(task, tuple(args), dict(kwargs), compensate)


def chain(*nodes: _Node) -> Chain:
    return Chain(_nodes("chain", nodes))


def group(*nodes: _Node, fail_fast: bool = True) -> Group:
    return Group(_nodes("group", nodes), fail_fast=fail_fast)


def chord(header: Group | _Node, callback: _Node) -> Chord:
    if not isinstance(header, Group):
        raise InvalidCanvas(f"chord() takes a group(...) first, not {header!r}")
    return Chord(header, _nodes("chord", (callback,))[0])


def wait_signal(name: str, *, timeout: float | None = None) -> WaitSignal:
    if not (isinstance(name, str) and 0 < len(name) <= 200):
        raise InvalidCanvas(f"a signal name is a string of 1 to 200 characters, not {name!r}")
    if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
        raise InvalidCanvas(f"timeout must be a positive number of seconds, not {timeout!r}")
    return WaitSignal(name, timeout)


def _nodes(what: str, nodes: tuple[Any, ...]) -> tuple[_Node, ...]:
    if len(nodes) == 1 and isinstance(nodes[0], list | tuple):
        nodes = tuple(nodes[0])
    for node in nodes:
        if not isinstance(node, _Node):
            raise InvalidCanvas(f"{what}() takes steps, chains, groups, chords and waits, not {node!r}")
    return tuple(nodes)
