"""The SQL files behind the store, and the channel workers LISTEN on."""

from functools import cache
from pathlib import Path
from typing import Any

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
NOTIFY_CHANNEL = "jobs_queued"


@cache
def sql(name: str) -> str:
    """The statement in jobs/sql/<name>.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()


def execute(cursor: Any, statement: str, params: Any, *, prepare: bool) -> None:
    """Run ``statement``; with ``prepare``, as a prepared statement from its first run on
    (a psycopg cursor whose connection has a ``prepare_threshold``: with None, psycopg
    prepares nothing, as JOBS_PREPARED_STATEMENTS=false asks). A Django cursor takes no
    ``prepare``, so callers that may pass one leave it False."""
    if prepare:
        cursor.execute(statement, params, prepare=True)
    else:
        cursor.execute(statement, params)
