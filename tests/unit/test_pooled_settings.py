"""JOBS_POOLED and JOBS_LISTEN_URL: what the settings make of them, and a bad URL refused."""

from __future__ import annotations

import importlib
import os

import pytest
from django.conf import settings
from django.test import override_settings

from jobs.checks import check_listen_url


def settings_with(monkeypatch: pytest.MonkeyPatch, **env: str) -> list[bool]:
    """config/settings.py evaluated afresh in an environment with ``env`` as its only JOBS_*."""
    for name in [name for name in os.environ if name.startswith("JOBS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    module = importlib.reload(importlib.import_module("config.settings"))
    return [
        module.JOBS["LISTEN"],
        module.JOBS["PREPARED_STATEMENTS"],
        module.DATABASES["default"].get("DISABLE_SERVER_SIDE_CURSORS", False),
    ]


def test_pooled_turns_off_listen_prepared_statements_and_server_side_cursors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert settings_with(monkeypatch) == [True, True, False]
    assert settings_with(monkeypatch, JOBS_POOLED="true") == [False, False, True]
    # With a direct connection to listen on, the wake-ups stay.
    direct = "postgres://u@db:5432/app"
    assert settings_with(monkeypatch, JOBS_POOLED="true", JOBS_LISTEN_URL=direct) == [True, False, True]
    # PgBouncer >= 1.21 keeps prepared statements: they may be turned back on.
    assert settings_with(monkeypatch, JOBS_POOLED="true", JOBS_PREPARED_STATEMENTS="true")[1] is True
    # The module as this run's environment makes it, for whatever imports it next.
    monkeypatch.undo()
    importlib.reload(importlib.import_module("config.settings"))


def test_a_listen_url_libpq_cannot_read_is_an_error_at_start() -> None:
    for bad in ("not a url", "postgres://u@db/app?bogus=1"):
        with override_settings(JOBS={**settings.JOBS, "LISTEN_URL": bad}):
            (error,) = check_listen_url()
        assert error.id == "jobs.E001"
        assert "JOBS_LISTEN_URL" in error.msg
    with override_settings(JOBS={**settings.JOBS, "LISTEN_URL": "postgres://u@db:5432/app"}):
        assert check_listen_url() == []
