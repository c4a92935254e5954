"""System checks (``manage.py check``, and every runworker start): a JOBS_LISTEN_URL that
libpq cannot read fails at start, not in a listener that keeps reconnecting."""

from __future__ import annotations

from typing import Any

import psycopg
from django.core import checks
from psycopg.conninfo import conninfo_to_dict

from .conf import jobs_settings


@checks.register("jobs")
def check_listen_url(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    url = jobs_settings().LISTEN_URL
    if not url:
        return []
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        return [
            checks.Error(
                f"JOBS_LISTEN_URL is not a connection URL libpq can read: {exc}",
                hint="e.g. postgres://user@db-primary:5432/dbname (a direct connection, past the pooler)",
                id="jobs.E001",
            )
        ]
    return []
