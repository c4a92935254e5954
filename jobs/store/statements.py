"""The SQL files behind the store, and the channel workers LISTEN on."""

from functools import cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
NOTIFY_CHANNEL = "jobs_queued"


@cache
def sql(name: str) -> str:
    """The statement in jobs/sql/<name>.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()
