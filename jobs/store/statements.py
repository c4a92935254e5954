"""The SQL files behind the store, the database's own functions, and the channel workers
LISTEN on."""

from functools import cache
from pathlib import Path
from typing import Any

from psycopg.pq import TransactionStatus

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
# The current source of every plpgsql function and trigger, one function (with its trigger)
# per file. Migrations load these files, so today's definition is read in one place; a
# change to a file needs a new migration that loads it again (load_functions).
FUNCTIONS_DIR = SQL_DIR / "functions"
NOTIFY_CHANNEL = "jobs_queued"


@cache
def sql(name: str) -> str:
    """The statement in jobs/sql/<name>.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()


def listen(conn: Any) -> None:
    """LISTEN on a worker's connection for the enqueues' wake-ups."""
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")


def function_names() -> list[str]:
    """The functions defined in jobs/sql/functions/, by file name."""
    return sorted(path.stem for path in FUNCTIONS_DIR.glob("*.sql"))


def function_source(name: str) -> str:
    """The current source of function ``name``: CREATE OR REPLACE FUNCTION, and its trigger
    as CREATE OR REPLACE TRIGGER, so loading it again changes nothing."""
    return (FUNCTIONS_DIR / f"{name}.sql").read_text()


def load_functions(cursor: Any, names: list[str] | None = None) -> None:
    """(Re)create the functions ``names`` (all of them by default) from their files. A plain
    function may call one defined later in the list: plpgsql resolves calls when it runs."""
    for name in names if names is not None else function_names():
        cursor.execute(function_source(name))


def execute(cursor: Any, statement: str, params: Any, *, prepare: bool) -> None:
    """Run ``statement``; with ``prepare``, as a prepared statement from its first run on
    (a psycopg cursor whose connection has a ``prepare_threshold``: with None, psycopg
    prepares nothing, as JOBS_PREPARED_STATEMENTS=false asks). A Django cursor takes no
    ``prepare``, so callers that may pass one leave it False."""
    if prepare:
        cursor.execute(statement, params, prepare=True)
    else:
        cursor.execute(statement, params)


def outside_transaction(conn: Any) -> bool:
    """Whether a statement on ``conn`` (a psycopg connection) commits on its own: autocommit,
    and no transaction open."""
    return bool(conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE)
