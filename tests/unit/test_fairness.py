"""How an executor shares its capacity between weighted queues (jobs/worker/fairness.py):
the jobs started keep the weights whatever the batch sizes, nothing idles while another
queue has work, and each queue's own order is kept."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import pytest

from jobs.worker.config import parse_queues
from jobs.worker.fairness import QueueShares


@dataclass
class Costs:
    """A budget of ``left`` that each job of a queue spends its cost of; a job may overrun
    what is left (as jobs/worker/prefetch.py's ClaimBudget)."""

    costs: dict[str, float] = field(default_factory=dict)
    left: float = math.inf
    spent: Counter[str] = field(default_factory=Counter)
    calls: int = 0

    def spend(self, queue: str, at_most: int = 1) -> int:
        self.calls += 1
        taken = 0
        while taken < at_most and self.left > 0:
            self.left -= self.costs.get(queue, 0.0)
            taken += 1
        self.spent[queue] += taken
        return taken


def unlimited() -> Costs:
    return Costs()


def drain(shares: QueueShares, claims: int, batch: int, *, has_work: set[str] | None = None) -> Counter[str]:
    """Simulate ``claims`` claims of ``batch`` against queues that always have work."""
    taken: Counter[str] = Counter()
    for _ in range(claims):
        quotas = shares.quotas(limit=batch, budget=unlimited())
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
        quotas = shares.quotas(limit=1, budget=unlimited())
        [name] = [n for n, q in zip(shares.names, quotas, strict=True) if q]
        shares.took(quotas, {name: 1})
        order.append(name)
    assert Counter(order) == {"email": 6, "low": 3}
    assert "low" in order[:3]


def test_a_dry_queue_gives_its_share_to_the_others_and_is_still_probed() -> None:
    shares = QueueShares(parse_queues("email:6,low:1"))
    drain(shares, claims=1, batch=70, has_work={"low"})
    quotas = shares.quotas(limit=70, budget=unlimited())
    assert dict(zip(shares.names, quotas, strict=True)) == {"email": 1, "low": 70}


def test_a_queue_that_was_empty_collects_no_credit() -> None:
    shares = QueueShares(parse_queues("email:1,low:1"))
    drain(shares, claims=100, batch=10, has_work={"low"})
    # email gets work again: from now on the two share equally, no burst for email.
    taken = drain(shares, claims=50, batch=10)
    assert taken["email"] == pytest.approx(taken["low"], rel=0.05)


def test_budget_limits_the_batch_by_each_queues_cost() -> None:
    shares = QueueShares(parse_queues("slow:1,fast:1"))
    budget = Costs({"slow": 10.0, "fast": 1.0}, left=20.0)
    quotas = dict(zip(shares.names, shares.quotas(limit=200, budget=budget), strict=True))
    # slow (20 -> 10), fast (-> 9), slow (-> -1): then nothing fits.
    assert quotas == {"slow": 2, "fast": 1}


def test_no_budget_no_claim() -> None:
    shares = QueueShares(parse_queues("a:1,b:1"))
    assert shares.quotas(limit=200, budget=Costs(left=0.0)) == [0, 0]
    strict = QueueShares(parse_queues("a:1,b:1"), strict=True)
    quotas = strict.quotas(limit=200, budget=Costs(left=0.0))
    assert strict.batch_size(quotas, 200) == 0


def test_strict_queues_ask_everything_of_each_and_the_batch_is_sized_by_the_budget() -> None:
    shares = QueueShares(parse_queues("low:1,email:6"), strict=True)

    budget = Costs({"low": 1.0, "email": 100.0}, left=5.0)
    quotas = shares.quotas(limit=200, budget=budget)
    # Sized by the first queue's jobs.
    assert quotas == [5, 5] and shares.batch_size(quotas, 200) == 5 and budget.spent == {"low": 5}


def test_a_batch_is_started_interleaved_and_in_each_queues_order() -> None:
    shares = QueueShares(parse_queues("email:2,low:1"))
    rows = [("email", 0), ("email", 1), ("email", 2), ("email", 3), ("low", 0), ("low", 1)]
    order = [rows[i] for i in shares.order(rows)]
    assert [r for r in order if r[0] == "email"] == [("email", i) for i in range(4)]
    assert [r for r in order if r[0] == "low"] == [("low", 0), ("low", 1)]
    assert order.index(("low", 0)) < order.index(("email", 3))


def test_the_last_queue_left_takes_the_rest_of_the_batch_in_one_step() -> None:
    # A weighted executor whose other queues ran dry (or have no room) sizes its claim for
    # the one left in one spend, as a worker of one queue does, not job by job.
    shares = QueueShares(parse_queues("default,email,push,low"))
    drain(shares, claims=1, batch=8, has_work={"default"})
    budget = Costs()
    quotas = shares.quotas(limit=200, budget=budget)
    assert quotas == [200, 1, 1, 1] and budget.spent == {"default": 200} and budget.calls == 1
