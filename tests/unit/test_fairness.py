"""How an executor shares its capacity between weighted queues (jobs/worker/fairness.py):
the jobs started keep the weights whatever the batch sizes, nothing idles while another
queue has work, and each queue's own order is kept."""

from __future__ import annotations

from collections import Counter

import pytest

from jobs.worker.config import parse_queues
from jobs.worker.fairness import QueueShares


def unlimited(queue: str, at_most: int) -> int:
    return at_most


def drain(shares: QueueShares, claims: int, batch: int, *, has_work: set[str] | None = None) -> Counter[str]:
    """Simulate ``claims`` claims of ``batch`` against queues that always have work."""
    taken: Counter[str] = Counter()
    for _ in range(claims):
        quotas = shares.quotas(limit=batch, spend=unlimited)
        got = {
            name: quota if has_work is None or name in has_work else 0
            for name, quota in zip(shares.names, quotas, strict=True)
        }
        shares.took(quotas, got)
        taken.update(got)
    return taken


@pytest.mark.parametrize("batch", [1, 3, 14, 200])
def test_jobs_are_taken_in_proportion_to_the_weights_whatever_the_batch(batch: int) -> None:
    shares = QueueShares(parse_queues("email:6,default:3,low:1"))
    taken = drain(shares, claims=2000 // batch + 10, batch=batch)
    total = sum(taken.values())
    assert taken["email"] / total == pytest.approx(0.6, abs=0.01)
    assert taken["default"] / total == pytest.approx(0.3, abs=0.01)
    assert taken["low"] / total == pytest.approx(0.1, abs=0.01)


def test_a_batch_of_one_alternates_by_weight() -> None:
    shares = QueueShares(parse_queues("email:2,low:1"))
    order = []
    for _ in range(9):
        quotas = shares.quotas(limit=1, spend=unlimited)
        [name] = [n for n, q in zip(shares.names, quotas, strict=True) if q]
        shares.took(quotas, {name: 1})
        order.append(name)
    assert Counter(order) == {"email": 6, "low": 3}
    assert "low" in order[:3]


def test_a_dry_queue_gives_its_share_to_the_others_and_is_still_probed() -> None:
    shares = QueueShares(parse_queues("email:6,low:1"))
    drain(shares, claims=1, batch=70, has_work={"low"})
    quotas = shares.quotas(limit=70, spend=unlimited)
    assert dict(zip(shares.names, quotas, strict=True)) == {"email": 1, "low": 70}


def test_a_queue_that_was_empty_collects_no_credit() -> None:
    shares = QueueShares(parse_queues("email:1,low:1"))
    drain(shares, claims=100, batch=10, has_work={"low"})
    # email gets work again: from now on the two share equally, no burst for email.
    taken = drain(shares, claims=50, batch=10)
    assert taken["email"] == pytest.approx(taken["low"], rel=0.05)


def test_budget_limits_the_batch_by_each_queues_cost() -> None:
    shares = QueueShares(parse_queues("slow:1,fast:1"))
    costs = {"slow": 10.0, "fast": 1.0}
    budget = {"left": 20.0}

    def spend(queue: str, at_most: int) -> int:
        taken = 0
        while taken < at_most and budget["left"] > 0:
            budget["left"] -= costs[queue]
            taken += 1
        return taken

    quotas = dict(zip(shares.names, shares.quotas(limit=200, spend=spend), strict=True))
    # slow (20 -> 10), fast (-> 9), slow (-> -1): then nothing fits.
    assert quotas == {"slow": 2, "fast": 1}


def test_no_budget_no_claim() -> None:
    shares = QueueShares(parse_queues("a:1,b:1"))
    assert shares.quotas(limit=200, spend=lambda queue, at_most: 0) == [0, 0]
    strict = QueueShares(parse_queues("a:1,b:1"), strict=True)
    quotas = strict.quotas(limit=200, spend=lambda queue, at_most: 0)
    assert strict.batch_size(quotas, 200) == 0


def test_strict_queues_ask_everything_of_each_and_the_batch_is_sized_by_the_budget() -> None:
    shares = QueueShares(parse_queues("low:1,email:6"), strict=True)

    def spend(queue: str, at_most: int) -> int:
        assert queue == "low"  # sized by the first queue's jobs
        return min(at_most, 5)

    quotas = shares.quotas(limit=200, spend=spend)
    assert quotas == [5, 5] and shares.batch_size(quotas, 200) == 5


def test_a_batch_is_started_interleaved_and_in_each_queues_order() -> None:
    shares = QueueShares(parse_queues("email:2,low:1"))
    rows = [("email", 0), ("email", 1), ("email", 2), ("email", 3), ("low", 0), ("low", 1)]
    order = [rows[i] for i in shares.order(rows)]
    assert [r for r in order if r[0] == "email"] == [("email", i) for i in range(4)]
    assert [r for r in order if r[0] == "low"] == [("low", 0), ("low", 1)]
    assert order.index(("low", 0)) < order.index(("email", 3))
