"""JobOptions: the option bundle a job row carries, from a task to the row's columns and
back from a claimed row to the retry policy the worker decides with."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
from django.db.models import NOT_PROVIDED
from django.tasks.exceptions import InvalidTask

from jobs.backend import JobTask
from jobs.models import Job
from jobs.options import OPTION_COLUMNS, JobOptions, check_task_options


class Flaky(Exception):
    pass


def handler() -> None:
    pass


def test_a_tasks_options_reach_the_row_and_come_back_as_its_retry_policy() -> None:
    task = JobTask(
        func=handler, max_attempts=7, backoff_base=2.0, backoff_cap=60.0, jitter=False,
        timeout=30.0, soft_timeout=20.0, lease_seconds=120.0, non_retryable=(Flaky, "builtins.KeyError"),
    )  # fmt: skip
    options = JobOptions.of_task(task, default_max_attempts=25)
    columns = dict(zip(OPTION_COLUMNS, options.column_values, strict=True))
    assert columns["jitter"] is False
    # As a statement takes a text[]: a list.
    assert columns["non_retryable"] == [f"{__name__}.Flaky", "builtins.KeyError"]
    assert not options.plain

    class Row:  # a claimed row: the columns as attributes, non_retryable a list
        task_path = "x"

    row = Row()
    for name, value in columns.items():
        setattr(row, name, value)
    assert JobOptions.from_row(row) == options
    assert JobOptions.from_columns(options.column_values) == options

    policy = options.retry_policy(task_path=__name__, backoff_base=1.0, backoff_cap=3600.0)
    assert (policy.max_attempts, policy.backoff_base, policy.backoff_cap, policy.jitter) == (
        7,
        2.0,
        60.0,
        False,
    )
    assert policy.non_retryable == (Flaky, KeyError)


def test_unset_options_are_null_on_the_row_and_the_settings_in_the_policy() -> None:
    options = JobOptions.of_task(JobTask(func=handler), default_max_attempts=25)
    assert dict(zip(OPTION_COLUMNS, options.column_values, strict=True)) == {
        "max_attempts": 25, "timeout": None, "soft_timeout": None, "lease_seconds": None,
        "backoff_base": None, "backoff_cap": None, "jitter": None, "non_retryable": [],
    }  # fmt: skip
    # The columns' defaults stand for every option but max_attempts (insert_plain.sql).
    assert options.plain
    policy = options.retry_policy(task_path=__name__, backoff_base=1.5, backoff_cap=99.0)
    assert (policy.backoff_base, policy.backoff_cap, policy.jitter) == (1.5, 99.0, True)


def test_each_option_is_the_job_column_of_its_name_and_defaults_as_the_column_does() -> None:
    # What lets the store write a JobOptions as it is, and insert_plain.sql leave out
    # every option at its default.
    for option in fields(JobOptions):
        if not option.init:
            continue
        column = Job._meta.get_field(option.name)
        assert column.column == option.name
        if option.default is MISSING:
            assert not column.null
        elif option.default is None:
            assert column.null and column.db_default is NOT_PROVIDED
        else:
            assert column.db_default == "{}" and option.default == ()
    assert tuple(option.name for option in fields(JobOptions) if option.init) == OPTION_COLUMNS


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff_cap": -1}, "backoff_cap must be a positive number"),
        ({"lease_seconds": 0.5}, "lease_seconds must be between"),
        ({"timeout": 5, "soft_timeout": 5}, "soft_timeout must be shorter"),
        ({"dedupe_window": 10}, "dedupe_window needs a dedupe_key"),
        ({"burst": 3}, "burst needs a rate_limit"),
    ],
)
def test_options_out_of_range_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidTask, match=message):
        check_task_options(JobTask(func=handler, **changes))  # type: ignore[arg-type]
