"""The retry policy is pure: backoff arithmetic and the meaning of each kind of error."""

import math
import random

import pytest

from jobs.exceptions import (
    BadPayload,
    BadReturnValue,
    Discard,
    Retry,
    Snooze,
    UnknownTask,
)
from jobs.retry import MAX_DELAY, RetryPolicy, backoff, decide

POLICY = RetryPolicy(max_attempts=5, backoff_base=2.0, backoff_cap=60.0)


class Permanent(Exception):
    pass


class MorePermanent(Permanent):
    pass


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 32.0), (6, 60.0), (7, 60.0), (0, 2.0), (-3, 2.0)],
)
def test_backoff_without_jitter_doubles_from_base_up_to_cap(attempt: int, expected: float) -> None:
    assert backoff(attempt, base=2.0, cap=60.0, jitter=False) == expected


@pytest.mark.parametrize(("spread", "low"), [(0.5, 4.0), (0.25, 6.0), (1.0, 0.0)])
def test_backoff_jitter_takes_at_most_its_spread_off(spread: float, low: float) -> None:
    # Attempt 3 with base 2: 8 seconds before jitter.
    assert backoff(3, base=2.0, cap=60.0, spread=spread, rand=lambda: 0.0) == low
    assert backoff(3, base=2.0, cap=60.0, spread=spread, rand=lambda: 1.0) == 8.0


def test_backoff_of_a_huge_attempt_is_the_cap_without_overflow() -> None:
    assert backoff(10_000, base=2.0, cap=3600.0, jitter=False) == 3600.0
    assert backoff(10_000, base=2.0, cap=3600.0, rand=lambda: 0.0) == 1800.0


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 5, 6, 7, 20])
def test_equal_jitter_stays_in_the_upper_half_of_the_backoff(attempt: int) -> None:
    full = backoff(attempt, base=2.0, cap=60.0, jitter=False)
    assert backoff(attempt, base=2.0, cap=60.0, rand=lambda: 0.0) == full / 2
    assert backoff(attempt, base=2.0, cap=60.0, rand=lambda: 0.5) == full * 0.75
    rng = random.Random(attempt)
    draws = [backoff(attempt, base=2.0, cap=60.0, rand=rng.random) for _ in range(2000)]
    assert all(full / 2 <= d < full for d in draws)
    # Spread over the whole half, not stuck at one end.
    assert min(draws) < full * 0.55
    assert max(draws) > full * 0.95


def test_an_ordinary_error_is_retried_after_the_backoff_of_its_attempt() -> None:
    decision = decide(RuntimeError("x"), attempt=3, policy=POLICY, rand=lambda: 0.0)
    assert (decision.state, decision.delay, decision.refund) == ("queued", 4.0, False)
    assert decision.reason == "retrying"


def test_the_last_attempt_sends_the_job_to_dead() -> None:
    decision = decide(RuntimeError("x"), attempt=5, policy=POLICY)
    assert decision.state == "dead"
    assert decision.reason == "attempts exhausted (5/5)"
    # A row whose max_attempts was lowered after it ran more often is dead too.
    assert decide(RuntimeError("x"), attempt=7, policy=POLICY).state == "dead"


def test_retry_with_after_uses_that_delay_instead_of_the_backoff() -> None:
    decision = decide(Retry("busy", after=42), attempt=1, policy=POLICY, rand=lambda: 0.0)
    assert (decision.state, decision.delay, decision.refund) == ("queued", 42.0, False)
    assert decide(Retry(after=-5), attempt=1, policy=POLICY).delay == 0.0


def test_retry_without_after_uses_the_backoff() -> None:
    decision = decide(Retry("busy"), attempt=2, policy=POLICY, rand=lambda: 0.0)
    assert (decision.state, decision.delay) == ("queued", 2.0)


def test_retry_does_not_grant_attempts_beyond_max_attempts() -> None:
    assert decide(Retry(after=1), attempt=5, policy=POLICY).state == "dead"


def test_snooze_gives_the_attempt_back_even_on_the_last_attempt() -> None:
    decision = decide(Snooze(30), attempt=5, policy=POLICY)
    assert (decision.state, decision.delay, decision.refund) == ("queued", 30.0, True)
    assert decide(Snooze(-1), attempt=1, policy=POLICY).delay == 0.0


def test_discard_is_dead_at_once_with_its_reason() -> None:
    decision = decide(Discard("account deleted"), attempt=1, policy=POLICY)
    assert decision.state == "dead"
    assert decision.reason == "discarded: account deleted"


@pytest.mark.parametrize("error", [BadPayload("x"), BadReturnValue("x"), UnknownTask("x")])
def test_errors_of_the_row_or_code_are_never_retried(error: Exception) -> None:
    decision = decide(error, attempt=1, policy=POLICY)
    assert decision.state == "dead"
    assert decision.reason == f"not retryable: {type(error).__name__}"


def test_non_retryable_exceptions_and_their_subclasses_are_dead_at_once() -> None:
    policy = RetryPolicy(max_attempts=5, backoff_base=2.0, backoff_cap=60.0, non_retryable=(Permanent,))
    assert decide(Permanent(), attempt=1, policy=policy).state == "dead"
    assert decide(MorePermanent(), attempt=1, policy=policy).reason == "not retryable: MorePermanent"
    assert decide(RuntimeError(), attempt=1, policy=policy).state == "queued"


def test_policy_options_change_the_delay() -> None:
    policy = RetryPolicy(max_attempts=10, backoff_base=10.0, backoff_cap=25.0, jitter=False)
    delays = [decide(RuntimeError(), attempt=n, policy=policy).delay for n in (1, 2, 3, 4)]
    assert delays == [10.0, 20.0, 25.0, 25.0]


@pytest.mark.parametrize(
    ("error", "delay"),
    [
        (Retry(after=math.inf), MAX_DELAY),
        (Retry(after=1e15), MAX_DELAY),
        (Retry(after=math.nan), 0.0),
        (Snooze(math.inf), MAX_DELAY),
        (Snooze(1e300), MAX_DELAY),
        (Snooze(math.nan), 0.0),
    ],
)
def test_a_delay_asked_for_by_a_handler_stays_storable(error: Exception, delay: float) -> None:
    # Beyond MAX_DELAY the database's timestamps overflow, and NaN or infinity is not JSON:
    # either would fail the write of the whole batch of outcomes it belongs to.
    assert decide(error, attempt=1, policy=POLICY).delay == delay
    assert MAX_DELAY >= 10 * 365 * 86400


def test_a_huge_backoff_cap_is_clamped_too() -> None:
    policy = RetryPolicy(max_attempts=100, backoff_base=1e10, backoff_cap=1e20, jitter=False)
    assert decide(RuntimeError(), attempt=50, policy=policy).delay == MAX_DELAY
