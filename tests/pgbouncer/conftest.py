"""A private PgBouncer in transaction mode in front of the test database, for the whole tier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.support.servers import PgBouncer


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup: None, django_db_blocker: object) -> Iterator[PgBouncer]:
    settings = connection.settings_dict
    bouncer = PgBouncer(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432), pool_size=3)
    yield bouncer
    bouncer.stop()


@pytest.fixture
def pooled(pgbouncer: PgBouncer) -> dict[str, str]:
    """Environment for a manage.py subprocess that reaches the test database through
    PgBouncer, as a deployment behind a pooler would: JOBS_POOLED, no direct connection."""
    return {"DATABASE_URL": pgbouncer.url(connection.settings_dict["NAME"]), "JOBS_POOLED": "true"}
