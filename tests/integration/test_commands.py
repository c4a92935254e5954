"""The management commands refuse bad arguments with a clear message, before doing anything."""

from __future__ import annotations

import os

import pytest
from django.core.management import BaseCommand, CommandError, call_command

from jobs.management.commands import runworker
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
        (["--max-jobs-per-child", "-1"], "--max-jobs-per-child must be 0 (never replace) or more"),
        (
            ["--reload", "--burst"],
            "--reload restarts a worker that runs until stopped; it cannot go with --burst",
        ),
    ],
)
def test_runworker_refuses_bad_options(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as info:
        call_command("runworker", *args)
    assert str(info.value) == message
    assert not Worker.objects.exists()


def test_runworker_help_shows_the_default_of_every_option() -> None:
    parser = runworker.Command().create_parser("manage.py", "runworker")
    base = BaseCommand().create_parser("manage.py", "base")
    base_options = {option for action in base._actions for option in action.option_strings}
    own = [a for a in parser._actions if a.option_strings and not set(a.option_strings) & base_options]
    assert {a.option_strings[0] for a in own} >= {"--queues", "--concurrency", "--reload"}
    for action in own:
        assert "(default: " in (action.help or ""), action.option_strings
    helptext = " ".join(parser.format_help().split())
    assert "default: every configured queue, weight 1: default,email,low,push" in helptext
    assert f"default: the CPU count, {os.cpu_count()} here" in helptext


@pytest.mark.django_db
def test_runscheduler_refuses_a_bad_max_sleep() -> None:
    with pytest.raises(CommandError, match="--max-sleep must be positive"):
        call_command("runscheduler", "--max-sleep", "0")


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["benchmark", "chaos"])
def test_the_drills_refuse_a_database_that_is_not_theirs(command: str) -> None:
    with pytest.raises(CommandError, match="database 'test_"):
        call_command(command)
