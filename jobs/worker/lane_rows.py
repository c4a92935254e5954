"""The rows one lane of an executor holds: waiting to start, held for a rate's start time,
and running. The lane that runs them is in lanes.py; this is the executor's account of
what it gave that lane, kept under the feeder's lock."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..store import Claimed

# The kinds of lane (lanes.py): the executor's main thread, handler threads, an event loop.
INLINE, THREADS, ASYNC = "inline", "threads", "async"


@dataclass
class LaneRows:
    """Book-keeping for one kind of handler slot."""

    name: str
    # Slot-table entries of this lane, and how many handlers may run at once.
    entries: list[int]
    waiting: deque[Claimed] = field(default_factory=deque)
    # Rows a rate gave a start time a few ms ahead: (monotonic time, row), in time order;
    # they go to ``waiting`` then.
    held: list[tuple[float, Claimed]] = field(default_factory=list)
    # entry -> (row, monotonic start)
    running: dict[int, tuple[Claimed, float]] = field(default_factory=dict)
    # The rows in hand must have started by then (monotonic), or go back: the earliest of
    # their claims' deadlines (half their short lease before a start, store.UNSTARTED_LEASE).
    start_by: float = float("inf")
    # Called (with the feeder's lock held) when rows were added or the lane must stop.
    on_rows: Callable[[], None] = lambda: None

    @property
    def free(self) -> int:
        return len(self.entries) - len(self.running) - len(self.waiting) - len(self.held)

    @property
    def has_room(self) -> bool:
        """A slot is free for a row to start in at once."""
        return len(self.running) + len(self.waiting) < len(self.entries)

    @property
    def queued(self) -> bool:
        """Rows in hand that have not started (waiting, or held for their start time)."""
        return bool(self.waiting or self.held)
