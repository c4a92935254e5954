"""scripts/run's ADMIN_PASSWORD step: creates the admin user, sets a changed password on a
later run and says so, and leaves an unchanged one alone (the step's own lines, run here
against the test database)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests.conftest import ROOT


def admin_step() -> str:
    script = (ROOT / "scripts" / "run").read_text()
    found = re.search(r"--command '\n(.*?)\n'\n", script, re.DOTALL)
    assert found, "scripts/run has no ADMIN_PASSWORD step"
    return found.group(1)


def run_step(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], password: str) -> str:
    monkeypatch.setenv("ADMIN_USER", "admin")
    monkeypatch.setenv("ADMIN_EMAIL", "admin@example.com")
    monkeypatch.setenv("ADMIN_PASSWORD", password)
    call_command("shell", command=admin_step(), verbosity=0)
    return capsys.readouterr().out


@pytest.mark.django_db
def test_a_changed_admin_password_is_set_and_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "created" in run_step(monkeypatch, capsys, "first-secret")
    assert run_step(monkeypatch, capsys, "first-secret") == ""
    assert "password set" in run_step(monkeypatch, capsys, "second-secret")
    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password("second-secret")
    assert admin.is_superuser and admin.is_staff
