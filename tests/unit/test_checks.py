"""``manage.py check`` names each bad engine setting with its own id before anything runs."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

IMMEDIATE = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
OURS = {"BACKEND": "jobs.backend.PostgresBackend"}


def _jobs_errors() -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in checks.run_checks(tags=["jobs"]) if m.id and m.id.startswith("jobs.")]


def test_the_projects_settings_pass() -> None:
    assert _jobs_errors() == []


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ({"LEASE_SECONDS": 0.5}, ("jobs.E004", "JOBS['LEASE_SECONDS'] must be between 1 and 43200 seconds")),
        ({"LEASE_SECONDS": "300"}, ("jobs.E003", "JOBS['LEASE_SECONDS'] must be a number")),
        ({"POLL_INTERVAL": 0}, ("jobs.E004", "JOBS['POLL_INTERVAL'] must be more than 0 seconds")),
        ({"DEFAULT_MAX_ATTEMPTS": 0}, ("jobs.E004", "JOBS['DEFAULT_MAX_ATTEMPTS'] must be at least 1")),
        ({"DEFAULT_MAX_ATTEMPTS": 2.5}, ("jobs.E003", "JOBS['DEFAULT_MAX_ATTEMPTS'] must be a whole number")),
        ({"BACKOFF_BASE": -1}, ("jobs.E004", "JOBS['BACKOFF_BASE'] must be more than 0 seconds")),
        ({"DEFAULT_TIMEOUT": -1}, ("jobs.E004", "JOBS['DEFAULT_TIMEOUT'] must be 0 (no limit) or more")),
        ({"MAX_PAYLOAD_BYTES": 0}, ("jobs.E004", "JOBS['MAX_PAYLOAD_BYTES'] must be at least 1 byte")),
        ({"MAX_BATCH": 0}, ("jobs.E004", "JOBS['MAX_BATCH'] must be at least 1")),
        ({"ASYNC_CONCURRENCY": 0}, ("jobs.E004", "JOBS['ASYNC_CONCURRENCY'] must be at least 1")),
        ({"THREADS": -1}, ("jobs.E004", "JOBS['THREADS'] must be 0 or more")),
        ({"SHUTDOWN_TIMEOUT": -5}, ("jobs.E004", "JOBS['SHUTDOWN_TIMEOUT'] must be 0 or more seconds")),
        ({"RETENTION_DEAD": 0}, ("jobs.E004", "JOBS['RETENTION_DEAD'] must be more than 0 seconds")),
        ({"METRICS_PORT": 70000}, ("jobs.E004", "JOBS['METRICS_PORT'] must be a port number")),
        ({"LISTEN": "yes"}, ("jobs.E003", "JOBS['LISTEN'] must be True or False")),
        ({"POOLED": 1}, ("jobs.E003", "JOBS['POOLED'] must be True or False")),
        ({"HOSTNAME": 7}, ("jobs.E003", "JOBS['HOSTNAME'] must be a string")),
        ({"LIMITS": []}, ("jobs.E003", "JOBS['LIMITS'] must be a dict")),
        ({"LEASE_SECOND": 30}, ("jobs.E002", "JOBS['LEASE_SECOND'] is not a setting of the jobs app")),
        (
            {"SCHEDULER_TIME_ZONE": "Mars/Olympus"},
            ("jobs.E007", "JOBS['SCHEDULER_TIME_ZONE'] is not a time zone"),
        ),
        ({"LISTEN_URL": "not a url"}, ("jobs.E001", "JOBS_LISTEN_URL is not a connection URL")),
    ],
)
def test_each_bad_setting_has_its_own_error(jobs: dict[str, Any], expected: tuple[str, str]) -> None:
    with override_settings(JOBS=jobs):
        errors = _jobs_errors()
    assert len(errors) == 1, errors
    assert errors[0][0] == expected[0] and errors[0][1].startswith(expected[1]), errors


def test_jobs_must_be_a_dict() -> None:
    with override_settings(JOBS=[("LEASE_SECONDS", 30)]):
        assert _jobs_errors() == [("jobs.E002", "settings.JOBS must be a dict, not list.")]


def test_a_bool_is_not_a_number() -> None:
    with override_settings(JOBS={"MAX_BATCH": True}):
        assert [e[0] for e in _jobs_errors()] == ["jobs.E003"]


def test_no_backend_of_ours() -> None:
    with override_settings(TASKS={"default": IMMEDIATE}):
        [(error_id, message)] = _jobs_errors()
    assert error_id == "jobs.E005" and "no TASKS entry uses jobs.backend.PostgresBackend" in message


def test_two_backends_of_ours_without_an_alias() -> None:
    with override_settings(TASKS={"default": OURS, "jobs": OURS}):
        [(error_id, message)] = _jobs_errors()
    assert error_id == "jobs.E005" and 'JOBS["BACKEND_ALIAS"]' in message


def test_an_alias_that_is_not_ours() -> None:
    with override_settings(TASKS={"default": IMMEDIATE, "jobs": OURS}, JOBS={"BACKEND_ALIAS": "default"}):
        [(error_id, message)] = _jobs_errors()
    assert error_id == "jobs.E005" and "'default', which is not a TASKS entry" in message


def test_django_contrib_postgres_is_required_with_its_own_message() -> None:
    from django.conf import settings

    without = [app for app in settings.INSTALLED_APPS if app != "django.contrib.postgres"]
    with override_settings(INSTALLED_APPS=without):
        errors = _jobs_errors()
    assert errors == [
        (
            "jobs.E006",
            'the jobs app needs "django.contrib.postgres" in INSTALLED_APPS '
            "(its Job and Worker models use ArrayField)",
        )
    ]
