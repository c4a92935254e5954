"""What a ``runworker`` process is asked to do, parsed once from its options."""

from __future__ import annotations

from dataclasses import dataclass

from ..conf import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS, JobsSettings


class QueueSpecError(ValueError):
    """A --queues value that cannot be parsed."""


class LeaseOutOfRange(ValueError):
    """JOBS_LEASE_SECONDS too short for its heartbeats to be kept, or too long."""


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
    # Handler threads per executor for blocking tasks (0: the executor's main thread runs
    # them one at a time) and async handlers at once on its event loop.
    threads: int = 0
    async_concurrency: int = 50
    unknown_task_grace: float = 600.0
    database: str = "default"
    # /metrics served by the housekeeper on this port (0: off, and nothing is counted).
    metrics_port: int = 0
    metrics_addr: str = "127.0.0.1"
    # Where the wake-ups are heard (with ``listen``): each executor on its own connection,
    # when that connection can keep a LISTEN (no pooler in transaction mode, no separate
    # JOBS_LISTEN_URL); else one LISTEN connection per worker, in the housekeeper, which
    # wakes the executors through their pipes (relay.py).
    listen_in_executors: bool = False

    def __post_init__(self) -> None:
        if not MIN_LEASE_SECONDS <= self.lease_seconds <= MAX_LEASE_SECONDS:
            raise LeaseOutOfRange(
                f"JOBS_LEASE_SECONDS={self.lease_seconds:g} is out of range: it must be at least "
                f"{MIN_LEASE_SECONDS:g} s (leases are extended every third of it, and a stalled "
                "extension must be noticed and its housekeeper restarted within one lease) and "
                f"at most {MAX_LEASE_SECONDS:g} s"
            )

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
            "threads": conf.THREADS,
            "async_concurrency": conf.ASYNC_CONCURRENCY,
            "unknown_task_grace": conf.UNKNOWN_TASK_GRACE,
            "metrics_port": conf.METRICS_PORT,
            "metrics_addr": conf.METRICS_ADDR,
        }
        values.update({k: v for k, v in options.items() if v is not None})
        listen_here = bool(values["listen"]) and not conf.POOLED and not conf.LISTEN_URL
        values.setdefault("listen_in_executors", listen_here)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def slot_entries(self) -> int:
        """Slot-table entries per executor: the inline handler (or one per thread), then one
        per concurrent async handler."""
        return max(1, self.threads) + self.async_concurrency
