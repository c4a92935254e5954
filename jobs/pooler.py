"""Telling a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``) in front
of the database, where consecutive transactions of one client may run in different server
sessions.

Prepared statements are session state. Through such a pooler one client's ``_pg3_0`` is
missing on the next server session (InvalidSqlStatementName), already taken there by another
client (DuplicatePreparedStatement), or is another client's statement of the same name;
LISTEN and server-side cursors are session state too. So unless the deployment says so
(JOBS_POOLED, which turns those off), workers and enqueues refuse to run there instead of
running jobs wrongly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import psycopg

from .exceptions import JobsError

ADVICE = (
    "where prepared statements and LISTEN do not work: set JOBS_POOLED=true "
    "(or point DATABASE_URL past the pooler)"
)


class TransactionPooler(JobsError):
    """DATABASE_URL goes through a pooler in transaction mode and JOBS_POOLED is not set."""


def _server_pid(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_backend_pid()", prepare=False).fetchone()
    assert row is not None
    return int(row[0])


def behind_a_pooler(conn: psycopg.Connection) -> bool:
    """Whether the server session is not the one the connection was opened with: a pooler
    (PgBouncer in any pool mode) gives its clients a backend key of its own."""
    return _server_pid(conn) != conn.info.backend_pid


def transaction_mode(connect: Callable[[], psycopg.Connection], *, helpers: int = 4) -> str | None:
    """What shows that one client's transactions run in more than one server session, or
    None. A pooler in session mode keeps each client in its own session for its whole life.
    In transaction mode the session a client has just released serves the next client that
    asks (LIFO, PgBouncer's default), or the client itself moves on to the session idle the
    longest (round robin): so while other clients take sessions one by one and hold them,
    either one of them gets the first client's session or the first client gets another.
    ``connect`` gives autocommit connections."""
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(connect())
        own = _server_pid(first)
        for _ in range(helpers):
            helper = stack.enter_context(connect())
            stack.enter_context(helper.transaction())
            taken = _server_pid(helper)
            if taken == own:
                return f"server session {own} served two client connections"
            now = _server_pid(first)
            if now != own:
                return f"one client connection's transactions ran in server sessions {own} and {now}"
    return None


def refuse_transaction_pooler(conn: psycopg.Connection, connect: Callable[[], psycopg.Connection]) -> None:
    """Raise TransactionPooler if ``conn`` goes through a pooler in transaction mode. One
    query on a direct connection; a few short connections more only behind a pooler."""
    if not behind_a_pooler(conn):
        return
    try:
        evidence = transaction_mode(connect)
    except psycopg.OperationalError:
        # The pooler would not give the probe its connections (max_client_conn, a
        # timeout): nothing is known, and the database may well be fine.
        return
    if evidence is not None:
        raise TransactionPooler(
            f"DATABASE_URL goes through a connection pooler in transaction mode ({evidence}), {ADVICE}"
        )
