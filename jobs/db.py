"""Database connections outside Django's: autocommit psycopg, reconnect with backoff; and
the psycopg cursor enqueues use on Django's own (``enqueue_cursor``).

Workers and the scheduler do not use Django's connection for queue work: they need
autocommit, LISTEN, and control over reconnects; the backend's bulk enqueue and the limits
use ``connect`` too. It sits below the worker (jobs/worker imports it, never the reverse),
so web code reaches it without the worker's package. Handlers use Django's ORM as usual, on
Django's connection.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from django.apps import apps
from django.conf import settings
from django.db import connections
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads

from .conf import jobs_settings
from .pooler import TransactionPooler, refuse_transaction_pooler
from .retry import backoff

logger = logging.getLogger("jobs.worker")

T = TypeVar("T")

# Errors that may mean "the connection is gone" (is_connection_lost tells for sure), as
# opposed to a bug in a statement.
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
# SQLSTATEs of OperationalErrors that end the statement, not the session: a statement or
# lock timeout, a cancel. Others of that class (admin shutdown, a lost socket) end it.
_STATEMENT_ONLY = {"57014", "55P03", "55006", "55000"}
# A deadlock or a serialization failure: the statement lost a race with another one and
# was rolled back whole; run again, it goes through. These count as "lost" for the callers
# (is_connection_lost) on purpose: the operation runs again, which a fenced write may, where
# a statement's failure would make the outcome writer split its batch and record a refused
# outcome as a dead job (tests/integration/test_feeder_writes.py). Connection.run runs it
# again on the same connection (is_conflict), which is fine.
_CONFLICTS = {"40P01", "40001"}


def is_connection_lost(exc: BaseException, conn: psycopg.Connection | None = None) -> bool:
    """Whether ``exc`` means the connection is unusable (reconnect), rather than that one
    statement failed (a timeout, a conflict: report it, keep the connection)."""
    if conn is not None and (conn.closed or conn.broken):
        return True
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if isinstance(exc, psycopg.OperationalError):
        return getattr(exc, "sqlstate", None) not in _STATEMENT_ONLY
    return False


def is_conflict(exc: BaseException, conn: psycopg.Connection | None = None) -> bool:
    """Whether ``exc`` is a deadlock or a serialization failure on a connection that is
    still fine: the same statement, run again on it, is expected to go through."""
    if conn is None or conn.closed or conn.broken:
        return False
    return isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) in _CONFLICTS


# Keys of DATABASES[...]["OPTIONS"] that Django reads itself and libpq does not know.
DJANGO_ONLY_OPTIONS = ("pool", "server_side_binding", "isolation_level", "assume_role", "prepare_threshold")


def connect(database: str = "default", *, application_name: str = "jobs", **libpq: Any) -> psycopg.Connection:
    """An autocommit connection; ``libpq`` parameters override the defaults below."""
    db = settings.DATABASES[database]
    params: dict[str, Any] = {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "application_name": application_name,
        "connect_timeout": 5,
        # Dead peers are noticed by TCP keepalives rather than by a hung statement.
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    params.update(db.get("OPTIONS", {}))
    params.update(libpq)
    params = {k: v for k, v in params.items() if v is not None and k not in DJANGO_ONLY_OPTIONS}
    # The claim and outcome statements repeat all day: the feeder has them prepared from
    # their first run (prepare=True), and psycopg prepares any other after a few runs,
    # unless a pooler in transaction mode cannot track prepared statements.
    prepare_threshold = 5 if jobs_settings().PREPARED_STATEMENTS else None
    conn = psycopg.connect(autocommit=True, prepare_threshold=prepare_threshold, **params)
    set_json_loads(_loads, conn)
    return conn


# What the server answers to a connection it will never accept as configured (its FATAL
# messages, in English: a server with other lc_messages is retried like any other failure).
# Database aliases this process found reachable directly or through a pooler in session
# mode, where prepared enqueues are safe (pooler.refuse_transaction_pooler).
_direct_or_session: set[str] = set()


def enqueue_cursor(database: str) -> psycopg.Cursor[Any]:
    """The psycopg cursor enqueues use on Django's connection ``database``: the caller's
    connection, in the caller's transaction (invariant 1). A psycopg cursor rather than
    Django's, so the statement is prepared once per connection."""
    conn = connections[database]
    conn.validate_no_broken_transaction()
    conn.ensure_connection()
    raw = conn.connection
    if not jobs_settings().POOLED and database not in _direct_or_session:
        # Prepared enqueues through a pooler in transaction mode fail or run another
        # client's statement: a clear error instead, once per process (a database's pooler
        # does not come and go while the process lives).
        refuse_transaction_pooler(raw, lambda: connect(database, application_name="jobs-pooler-check"))
        _direct_or_session.add(database)
    if jobs_settings().PREPARED_STATEMENTS and raw.prepare_threshold is None:
        # Django turns psycopg's prepared statements off (for poolers that cannot keep
        # them). Its own cursors bind on the client and never prepare anyway; this lets
        # the enqueue statement be prepared once per connection. JOBS_PREPARED_STATEMENTS
        # =false keeps it off (PgBouncer older than 1.21 in transaction mode).
        raw.prepare_threshold = 5
    # One cursor per connection, kept on Django's connection object (making one costs
    # a tenth of the Python work of an enqueue); a new connection gets a new one.
    kept = getattr(conn, "_jobs_enqueue_cursor", None)
    if kept is None or kept.connection is not raw or kept.closed:
        kept = psycopg.Cursor(raw)
        conn._jobs_enqueue_cursor = kept  # type: ignore[attr-defined]
    return kept


_REFUSED = (
    ("does not exist", "the database or the role does not exist"),
    ("password authentication failed", "the password is wrong"),
    ("no pg_hba.conf entry", "the server's pg_hba.conf does not let this host, user and database in"),
    ("permission denied for database", "the role may not connect to this database"),
    ("authentication failed", "authentication failed"),
)
# The exit code of a worker or scheduler that cannot start as configured (sysexits'
# EX_CONFIG): restarting it will not help (e.g. systemd's RestartPreventExitStatus=78).
EX_CONFIG = 78


class DatabaseRefused(Exception):
    """The database refuses the configured connection: it will not get better by waiting."""


def refuse_unusable_database(database: str = "default") -> None:
    """Connect once: raise DatabaseRefused (with what to fix) if the server refuses the
    configured database, role or password, or if the database lacks the queue's latest
    migration (every claim would fail on a missing table or column, for ever), or if it goes
    through a pooler in transaction mode that the settings do not declare (JOBS_POOLED unset:
    claims would fail or run the wrong statement, jobs would die or run twice). A server that
    does not answer yet (starting, restarting, unreachable for a moment) is left to the
    reconnect loops."""
    name = settings.DATABASES[database].get("NAME")
    try:
        conn = connect(database, application_name="jobs-check")
    except psycopg.OperationalError as exc:
        text = str(exc).strip()
        for marker, meaning in _REFUSED:
            if marker in text:
                raise DatabaseRefused(
                    f"cannot use database {name!r}: {meaning} ({text}). Check DATABASE_URL"
                ) from exc
        return
    with conn:
        missing = _missing_migration(conn)
        if missing:
            raise DatabaseRefused(
                f"cannot use database {name!r}: the queue's migration {missing} is not applied there. "
                "Run `manage.py migrate` (or check DATABASE_URL)"
            )
        if not jobs_settings().POOLED:
            try:
                refuse_transaction_pooler(conn, lambda: connect(database, application_name="jobs-check"))
            except TransactionPooler as exc:
                raise DatabaseRefused(f"cannot use database {name!r}: {exc}") from exc


_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _missing_migration(conn: psycopg.Connection) -> str | None:
    """The latest migration of the jobs app if the database has not applied it, else None.
    Read from the file names, not Django's migration loader: no import of every migration
    module at the start of every worker."""
    latest = max(path.stem for path in _MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    # Recorded under the label the engine is installed with (a project may relabel it).
    engine = apps.get_containing_app_config(__name__)
    assert engine is not None, "the jobs app is not in INSTALLED_APPS"
    label = engine.label
    try:
        applied = conn.execute(
            "SELECT 1 FROM django_migrations WHERE app = %s AND name = %s", (label, latest)
        ).fetchone()
    except psycopg.errors.UndefinedTable:  # never migrated at all
        return latest
    return None if applied else latest


def listen_libpq() -> dict[str, Any]:
    """libpq parameters for a LISTEN connection: the server of ``JOBS_LISTEN_URL`` when set
    (a direct connection past a pooler in transaction mode, which cannot keep a LISTEN),
    else none (the database's own)."""
    url = jobs_settings().LISTEN_URL
    return dict(conninfo_to_dict(url)) if url else {}


def _loads(data: str | bytes) -> Any:
    """jsonb as the worker reads it: most jobs have no args or no kwargs at all."""
    if data == b"[]":
        return []
    if data == b"{}":
        return {}
    return json.loads(data)


class Connection:
    """One autocommit connection that reconnects, with capped exponential backoff."""

    def __init__(
        self,
        database: str,
        *,
        name: str,
        on_connect: Callable[[psycopg.Connection], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        libpq: dict[str, Any] | None = None,
    ) -> None:
        self.database = database
        self.name = name
        self.on_connect = on_connect
        self.should_stop = should_stop
        self.libpq = libpq or {}
        self.conn: psycopg.Connection | None = None
        self.cursor: psycopg.Cursor[Any] | None = None
        self.failures = 0
        self.conflicts = 0

    def ensure(self, *, wait: bool = True) -> psycopg.Cursor[Any]:
        """A live cursor, connecting as needed; with ``wait``, keep trying (with backoff)
        until the database answers, else raise at the first failure."""
        while self.cursor is None:
            try:
                conn = self.conn = connect(self.database, application_name=self.name, **self.libpq)
                if self.on_connect:
                    self.on_connect(conn)
                self.cursor = conn.cursor()
                if self.failures:
                    logger.warning("event=db_reconnected conn=%s after_failures=%d", self.name, self.failures)
                self.failures = 0
            except CONNECTION_ERRORS as exc:
                self.drop()
                self.failures += 1
                delay = backoff(self.failures + 1, base=0.05, cap=5.0)
                logger.warning(
                    "event=db_connect_failed conn=%s attempt=%d retry_in=%.2fs error=%r",
                    self.name,
                    self.failures,
                    delay,
                    str(exc).strip(),
                )
                if not wait or self.should_stop():
                    raise
                time.sleep(delay)
            except BaseException:
                # A half-set-up connection (on_connect failed) is not kept.
                self.drop()
                raise
        return self.cursor

    def run(self, operation: Callable[[psycopg.Cursor[Any]], T], *, retry: bool = True) -> T:
        """Run ``operation(cursor)``; on a lost connection reconnect and, if ``retry``, run
        it again (the operation must then be safe to repeat: fenced writes are)."""
        while True:
            cursor = self.ensure(wait=retry)
            try:
                result = operation(cursor)
            except psycopg.Error as exc:
                if not is_connection_lost(exc, self.conn):
                    # The statement failed, the connection is fine: the caller decides.
                    raise
                if is_conflict(exc, self.conn):
                    self.conflicted(exc, wait=retry and not self.should_stop())
                else:
                    self.lost(exc)
                if not retry or self.should_stop():
                    raise
            else:
                self.conflicts = 0
                return result

    def conflicted(self, exc: Exception, *, wait: bool) -> None:
        """A deadlock or a serialization failure: the connection stays; with ``wait``, pause
        a little (growing, jittered) so that the two sides do not meet again at once."""
        self.conflicts += 1
        logger.warning(
            "event=db_conflict conn=%s sqlstate=%s attempt=%d error=%r",
            self.name,
            getattr(exc, "sqlstate", None),
            self.conflicts,
            str(exc).strip(),
        )
        if wait:
            time.sleep(backoff(self.conflicts + 1, base=0.01, cap=1.0))

    def lost(self, exc: Exception) -> None:
        """The connection broke: log it and let the next use reconnect."""
        logger.warning("event=db_connection_lost conn=%s error=%r", self.name, str(exc).strip())
        self.drop()
        self.failures += 1

    def drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail any way
                logger.debug("event=db_close_failed conn=%s", self.name)
        self.conn = None
        self.cursor = None

    def read_notifies(self) -> int | None:
        """Read what the server sent to the connection while no statement ran (its socket
        was readable): how many notifications of a LISTEN came, or None if the server had
        closed the connection (dropped; the next use connects again)."""
        assert self.conn is not None
        pgconn = self.conn.pgconn
        count = 0
        try:
            pgconn.consume_input()
            while pgconn.notifies() is not None:
                count += 1
        except psycopg.Error as exc:
            self.lost(exc)
            return None
        return count

    def fileno(self) -> int | None:
        if self.conn is None or self.conn.closed:
            return None
        return self.conn.pgconn.socket
