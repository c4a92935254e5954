"""The worker: a supervisor process and its executor processes (see supervisor.py)."""

from .config import QueueSpecError, WorkerConfig, parse_queues
from .supervisor import Supervisor


def run_worker(config: WorkerConfig) -> int:
    return Supervisor(config).run()


__all__ = ["QueueSpecError", "WorkerConfig", "parse_queues", "run_worker"]
