"""What a ``runworker`` process is asked to do, parsed once from its options."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ..conf import JobsSettings


class QueueSpecError(ValueError):
    """A --queues value that cannot be parsed."""


def parse_queues(spec: str, *, known: set[str] | None = None) -> tuple[tuple[str, int], ...]:
    """``"email:6,default:3,low:1"`` -> (("email", 6), ("default", 3), ("low", 1)).

    A queue without a weight gets 1. Unknown queue names are rejected when ``known`` is
    given, so a typo does not leave a worker listening to nothing.
    """
    parsed: list[tuple[str, int]] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight_text = part.partition(":")
        name = name.strip()
        if not name:
            raise QueueSpecError(f"empty queue name in {part!r}")
        try:
            weight = int(weight_text) if weight_text else 1
        except ValueError:
            raise QueueSpecError(f"weight of queue {name!r} is not a whole number") from None
        if weight < 1:
            raise QueueSpecError(f"weight of queue {name!r} must be at least 1")
        if known is not None and name not in known:
            raise QueueSpecError(f"unknown queue {name!r}; configured queues: {', '.join(sorted(known))}")
        if name in (n for n, _ in parsed):
            raise QueueSpecError(f"queue {name!r} is listed twice")
        parsed.append((name, weight))
    if not parsed:
        raise QueueSpecError("no queue given")
    return tuple(parsed)


def weighted_order(
    queues: tuple[tuple[str, int], ...], rand: Callable[[], float] = random.random
) -> list[str]:
    """A random order of the queues where each comes first with probability weight/total.

    (Efraimidis-Spirakis: sort by u ** (1 / weight).) The claim visits queues in this order
    and fills its batch from the first ones that have due work, so under load the queues
    get turns in proportion to their weights, as in Asynq, and none is starved.
    """
    return [name for _, name in sorted(((rand() ** (1 / w), n) for n, w in queues), reverse=True)]


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    queues: tuple[tuple[str, int], ...]
    strict: bool
    concurrency: int
    burst: bool
    shutdown_timeout: float
    poll_interval: float
    listen: bool
    max_batch: int
    prefetch_horizon: float
    reaper_interval: float
    lease_seconds: float
    # Seconds; 0 means no limit for tasks that set none.
    default_timeout: float
    backoff_base: float
    backoff_cap: float
    max_jobs_per_child: int = 0
    database: str = "default"

    @classmethod
    def from_settings(cls, conf: JobsSettings, **options: object) -> WorkerConfig:
        values: dict[str, object] = {
            "shutdown_timeout": conf.SHUTDOWN_TIMEOUT,
            "poll_interval": conf.POLL_INTERVAL,
            "listen": conf.LISTEN,
            "max_batch": conf.MAX_BATCH,
            "prefetch_horizon": conf.PREFETCH_HORIZON,
            "reaper_interval": conf.REAPER_INTERVAL,
            "lease_seconds": conf.LEASE_SECONDS,
            "default_timeout": conf.DEFAULT_TIMEOUT,
            "backoff_base": conf.BACKOFF_BASE,
            "backoff_cap": conf.BACKOFF_CAP,
        }
        values.update({k: v for k, v in options.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    def queue_order(self) -> list[str]:
        if self.strict or len(self.queues) == 1:
            return [name for name, _ in self.queues]
        return weighted_order(self.queues)
