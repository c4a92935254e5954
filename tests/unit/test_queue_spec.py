"""``--queues`` parsing and the weighted queue order (jobs/worker/config.py)."""

import pytest

from jobs.conf import JobsSettings
from jobs.worker.config import QueueSpecError, WorkerConfig, parse_queues

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


@pytest.mark.parametrize(
    ("settings", "options", "in_executors", "listen"),
    [
        ({}, {}, True, True),
        # A pooler in transaction mode: LISTEN only on the direct connection, in the relay.
        ({"POOLED": True, "LISTEN_URL": "postgres://direct/jobs"}, {}, False, True),
        ({"LISTEN_URL": "postgres://direct/jobs"}, {}, False, True),
        ({"POOLED": True, "LISTEN": False}, {}, False, False),
        ({}, {"listen": False}, False, False),
    ],
)
def test_executors_listen_themselves_where_their_connections_can_keep_a_listen(
    settings: dict[str, object], options: dict[str, object], in_executors: bool, listen: bool
) -> None:
    config = WorkerConfig.from_settings(
        JobsSettings(**settings),  # type: ignore[arg-type]
        queues=parse_queues("default"),
        strict=False,
        concurrency=1,
        burst=False,
        **options,
    )
    assert (config.listen, config.listen_in_executors) == (listen, in_executors)
