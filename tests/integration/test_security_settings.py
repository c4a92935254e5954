"""The public site's baseline: a weak SECRET_KEY stops every start with DEBUG off, and
`check --deploy` is clean with the production settings .env.example documents."""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest

from config.security import secret_key_problem
from tests.conftest import ROOT, manage, subprocess_env

DEV = "dev-only-insecure-key-change-me"


def production_env() -> dict[str, str]:
    """The commented production block of .env.example, as environment variables."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# --- Production"))
    end = next(i for i, line in enumerate(lines) if line.startswith("# --- end of production"))
    values = {}
    for line in lines[start + 1 : end]:
        entry = line.removeprefix("# ").strip()
        if "=" in entry and entry.split("=", 1)[0].isupper():
            name, value = entry.split("=", 1)
            values[name] = value
    assert {"SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
            "SECURE_PROXY_SSL_HEADER", "CSRF_TRUSTED_ORIGINS"} <= set(values)  # fmt: skip
    values["SECRET_KEY"] = secrets.token_urlsafe(50)
    return values


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # The project's settings, not the test run's (tests/settings.py supplies a key).
    # Nor the checkout's own key file (scripts/run's).
    environment = subprocess_env(
        DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY_FILE="/nonexistent", **env
    )
    for name in [name for name, value in env.items() if value == "<unset>"]:
        environment.pop(name)
    process = manage(*args, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, "")


@pytest.mark.django_db
def test_check_deploy_is_clean_with_the_documented_production_settings() -> None:
    result = run("check", "--deploy", "--fail-level", "WARNING", **production_env())
    assert result.returncode == 0, result.stdout
    assert "System check identified no issues" in result.stdout


def env_file_with_production_uncommented() -> dict[str, str]:
    """What settings read from a .env made by copying .env.example and uncommenting its
    production block: every line, the later of two settings winning (django-environ)."""
    values: dict[str, str] = {}
    production = False
    for line in (ROOT / ".env.example").read_text().splitlines():
        production = (production or line.startswith("# --- Production")) and not line.startswith(
            "# --- end of production"
        )
        entry = line.removeprefix("# ") if production else line
        if "=" in entry and not entry.startswith("#") and entry.split("=", 1)[0].isupper():
            name, value = entry.split("=", 1)
            values[name] = value
    values["SECRET_KEY"] = secrets.token_urlsafe(50)
    values.pop("DATABASE_URL")  # the test run's own database
    return values


@pytest.mark.django_db
def test_check_deploy_is_clean_with_the_example_env_file_and_its_production_block() -> None:
    values = env_file_with_production_uncommented()
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] == values["SECURE_HSTS_PRELOAD"] == "true"
    result = run("check", "--deploy", "--fail-level", "WARNING", **values)
    assert result.returncode == 0, result.stdout
    assert "System check identified no issues (0 silenced)" in result.stdout


@pytest.mark.django_db
def test_check_deploy_warns_about_the_development_defaults() -> None:
    result = run(
        "check", "--deploy", "--fail-level", "WARNING", DEBUG="false", SECRET_KEY=secrets.token_urlsafe(50)
    )
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016", "notifications.W001"):
        assert check in result.stdout


@pytest.mark.parametrize(
    ("key", "problem"),
    [("<unset>", "not set"), (DEV, "not set"), ("short-key", "at least 50"), ("a" * 60, "distinct")],
)
def test_with_debug_off_a_weak_secret_key_stops_every_command(key: str, problem: str) -> None:
    result = run("check", DEBUG="false", SECRET_KEY=key)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stdout and problem in result.stdout


def test_with_debug_on_the_development_key_is_allowed() -> None:
    result = run("check", DEBUG="true", SECRET_KEY="<unset>")
    assert result.returncode == 0, result.stdout


def test_secret_key_problem() -> None:
    assert secret_key_problem(secrets.token_urlsafe(50), development_key=DEV) is None
    assert secret_key_problem("django-insecure-" + "x1y2z3" * 10, development_key=DEV)
    assert os.environ["SECRET_KEY"]  # the test run's own (tests/settings.py)
