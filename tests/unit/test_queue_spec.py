"""``--queues`` parsing and the weighted queue order (jobs/worker/config.py)."""

import random
from collections import Counter

import pytest

from jobs.conf import JobsSettings
from jobs.worker.config import QueueSpecError, WorkerConfig, parse_queues, weighted_order

KNOWN = {"default", "email", "push", "low"}


def test_weights_are_parsed_in_the_order_given() -> None:
    assert parse_queues("email:6,default:3,low:1") == (("email", 6), ("default", 3), ("low", 1))


def test_a_queue_without_weight_gets_one_and_blanks_are_ignored() -> None:
    assert parse_queues(" email , default:2 ,, ") == (("email", 1), ("default", 2))


def test_known_queues_are_accepted() -> None:
    assert parse_queues("push:2,email", known=KNOWN) == (("push", 2), ("email", 1))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("email:x", "weight of queue 'email' is not a whole number"),
        ("email:1.5", "weight of queue 'email' is not a whole number"),
        ("email:0", "weight of queue 'email' must be at least 1"),
        ("email:-2", "weight of queue 'email' must be at least 1"),
        ("email,email:2", "queue 'email' is listed twice"),
        ("", "no queue given"),
        (" , ,", "no queue given"),
        ("emial:3", "unknown queue 'emial'; configured queues: default, email, low, push"),
    ],
)
def test_bad_specs_are_rejected_with_a_clear_message(spec: str, message: str) -> None:
    with pytest.raises(QueueSpecError) as info:
        parse_queues(spec, known=KNOWN)
    assert str(info.value) == message


def test_an_empty_queue_name_is_rejected() -> None:
    with pytest.raises(QueueSpecError):
        parse_queues(":3")


def test_weighted_order_lists_every_queue_once() -> None:
    queues = parse_queues("email:6,default:3,low:1")
    rng = random.Random(1)
    for _ in range(200):
        assert sorted(weighted_order(queues, rng.random)) == ["default", "email", "low"]


def test_each_queue_comes_first_in_proportion_to_its_weight() -> None:
    queues = parse_queues("email:6,default:3,low:1")
    rng = random.Random(7)
    draws = 20_000
    first = Counter(weighted_order(queues, rng.random)[0] for _ in range(draws))
    assert first["email"] / draws == pytest.approx(0.6, abs=0.02)
    assert first["default"] / draws == pytest.approx(0.3, abs=0.02)
    assert first["low"] / draws == pytest.approx(0.1, abs=0.02)


def test_equal_weights_are_fair() -> None:
    queues = parse_queues("a,b")
    rng = random.Random(3)
    first = Counter(weighted_order(queues, rng.random)[0] for _ in range(10_000))
    assert first["a"] / 10_000 == pytest.approx(0.5, abs=0.02)


def _config(spec: str, *, strict: bool) -> WorkerConfig:
    return WorkerConfig.from_settings(
        JobsSettings(), queues=parse_queues(spec), strict=strict, concurrency=1, burst=True
    )


def test_strict_mode_always_visits_queues_in_the_order_given() -> None:
    config = _config("low:1,email:6", strict=True)
    assert all(config.queue_order() == ["low", "email"] for _ in range(50))


def test_weighted_mode_varies_the_order() -> None:
    config = _config("low:1,email:1", strict=False)
    assert len({tuple(config.queue_order()) for _ in range(200)}) == 2


def test_config_takes_settings_unless_an_option_overrides_them() -> None:
    config = WorkerConfig.from_settings(
        JobsSettings(POLL_INTERVAL=7.0, LEASE_SECONDS=90.0),
        queues=parse_queues("default"),
        strict=False,
        concurrency=2,
        burst=False,
        poll_interval=None,
        shutdown_timeout=3.0,
    )
    assert (config.poll_interval, config.lease_seconds, config.shutdown_timeout) == (7.0, 90.0, 3.0)
