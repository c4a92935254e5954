"""Retry policy, pure: how long to wait before the next attempt, and what an error means.

Nothing here touches the database or the clock; the worker applies the decision with a
fenced write in jobs/store/.
"""

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .exceptions import BadPayload, BadReturnValue, Discard, Retry, Snooze, UnknownTask

# Failures that would repeat on every attempt: the row or the code is wrong, not the world.
NEVER_RETRIED = (BadPayload, BadReturnValue, UnknownTask)

# The longest wait a decision asks for (ten years). Handlers choose Retry and Snooze delays
# and settings the backoff cap; past this the database's timestamps overflow, and NaN or
# infinity is not JSON: either would fail the write of a whole batch of outcomes.
MAX_DELAY = 10 * 365 * 86400.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    jitter: bool = True
    non_retryable: tuple[type[BaseException], ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    state: Literal["queued", "dead"]
    delay: float = 0.0
    # Snoozes give the attempt back.
    refund: bool = False
    reason: str = ""


def backoff(
    attempt: int,
    *,
    base: float,
    cap: float,
    jitter: bool = True,
    spread: float = 0.5,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    Exponential (base, 2*base, 4*base, ...) capped at ``cap``. With jitter the wait is drawn
    uniformly from the top ``spread`` of that value; the default (0.5) is "equal jitter":
    retries of jobs that failed together spread out, yet never come back sooner than half
    the backoff. 1.0 is full jitter (anywhere from 0). The one copy of this arithmetic:
    jobs/sql/reap.sql spells it in SQL, and a test holds the two together.
    """
    exponent = min(max(attempt - 1, 0), 62)
    delay = min(cap, base * (2**exponent))
    if jitter:
        delay = delay * (1 - spread) + rand() * delay * spread
    return delay


def decide(
    error: BaseException,
    *,
    attempt: int,
    policy: RetryPolicy,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """What happens to a job whose attempt number ``attempt`` ended with ``error``."""
    if isinstance(error, Snooze):
        return Decision("queued", delay=_storable(error.seconds), refund=True, reason="snoozed")
    if isinstance(error, Discard):
        return Decision("dead", reason=f"discarded: {error}")
    if isinstance(error, (NEVER_RETRIED, policy.non_retryable)):
        return Decision("dead", reason=f"not retryable: {type(error).__name__}")
    if attempt >= policy.max_attempts:
        return Decision("dead", reason=f"attempts exhausted ({attempt}/{policy.max_attempts})")
    if isinstance(error, Retry) and error.after is not None:
        return Decision("queued", delay=_storable(error.after), reason="retry requested")
    delay = backoff(
        attempt,
        base=policy.backoff_base,
        cap=policy.backoff_cap,
        jitter=policy.jitter,
        rand=rand,
    )
    return Decision("queued", delay=_storable(delay), reason="retrying")


def _storable(seconds: float) -> float:
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), MAX_DELAY)
