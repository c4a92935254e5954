"""Shared fixtures. Every test that touches the database runs on real PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent

# The SMTP server on loopback (smtp_sink, smtp_settings) for every tier.
pytest_plugins = ["tests.support.mail"]

# The drills: real worker processes, private servers, a fresh project, the engine's wheel in
# a site of its own, a million rows. A plain `pytest` (no paths, no -m) leaves them out so
# that it answers in minutes;
# `scripts/test` names every tier and runs them all, and naming a drill's path (or -m) runs it.
DRILLS = ("process", "pgbouncer", "replica", "fleet", "bootstrap", "million_rows", "downstream")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS or config.option.markexpr:
        return
    keep, drills = [], []
    for item in items:
        (drills if any(item.get_closest_marker(name) for name in DRILLS) else keep).append(item)
    if drills:
        config.hook.pytest_deselected(items=drills)
        items[:] = keep


@pytest.fixture
def side_effects(transactional_db: None) -> Iterator[None]:
    """A table handlers insert into, to count side effects across processes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS test_side_effects "
            "(id bigserial PRIMARY KEY, key text NOT NULL, at timestamptz DEFAULT now())"
        )
        cursor.execute("TRUNCATE test_side_effects")
    yield


def side_effect_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, count(*) FROM test_side_effects GROUP BY key")
        return dict(cursor.fetchall())


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a manage.py subprocess pointed at the test database."""
    settings = connection.settings_dict
    url = (
        f"postgres://{settings['USER'] or ''}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )
    env = dict(os.environ)
    env.update({"DATABASE_URL": url, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str] | None = None, **popen: object) -> subprocess.Popen[str]:
    """Start ``manage.py <args>`` as a real subprocess on the test database."""
    return subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env or subprocess_env(),
        text=True,
        **popen,
    )


@pytest.fixture(autouse=True)
def _limits_registered_afresh() -> Iterator[None]:
    """Transactional tests flush jobs_limit; the process must not keep believing the
    limits it registered are still there."""
    from jobs.limits import registry

    registry.forget()
    yield
    registry.forget()


@pytest.fixture
def media_root(tmp_path: Path, settings: object) -> Path:
    """Uploads and result files of this test only (a worker it starts needs MEDIA_ROOT=it)."""
    root = tmp_path / "media"
    root.mkdir()
    settings.MEDIA_ROOT = str(root)  # type: ignore[attr-defined]
    return root
