"""The management commands refuse bad arguments with a clear message, before doing anything."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Worker


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--queues", "emial:3"],
            "--queues: unknown queue 'emial'; configured queues: default, email, low, push",
        ),
        (["--queues", "email:x"], "--queues: weight of queue 'email' is not a whole number"),
        (["--queues", ","], "--queues: no queue given"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--concurrency", "-1"], "--concurrency must be at least 1"),
        (["--shutdown-timeout", "0"], "--shutdown-timeout must be positive"),
        (["--poll-interval", "-2"], "--poll-interval must be positive"),
    ],
)
def test_runworker_refuses_bad_options(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as info:
        call_command("runworker", *args)
    assert str(info.value) == message
    assert not Worker.objects.exists()


@pytest.mark.django_db
def test_runscheduler_refuses_a_bad_max_sleep() -> None:
    with pytest.raises(CommandError, match="--max-sleep must be positive"):
        call_command("runscheduler", "--max-sleep", "0")


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["benchmark", "chaos"])
def test_the_drills_refuse_a_database_that_is_not_theirs(command: str) -> None:
    with pytest.raises(CommandError, match="database 'test_"):
        call_command(command)
