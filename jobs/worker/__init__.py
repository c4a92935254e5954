"""The worker: a supervisor process, its housekeeper and its executor processes (see
supervisor.py). Importing the package loads nothing heavy: the web and the scheduler import
``jobs.worker.config`` without the worker's process machinery."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import QueueSpecError, WorkerConfig, parse_queues

if TYPE_CHECKING:
    from .supervisor import Supervisor


def run_worker(config: WorkerConfig) -> int:
    from .supervisor import Supervisor

    return Supervisor(config).run()


def __getattr__(name: str) -> Any:
    if name == "Supervisor":
        from .supervisor import Supervisor

        return Supervisor
    raise AttributeError(name)


__all__ = ["QueueSpecError", "Supervisor", "WorkerConfig", "parse_queues", "run_worker"]
