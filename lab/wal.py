"""WAL written by one database, read back from the log itself (pg_walinspect, PostgreSQL 15).

The server's WAL position and pg_stat_wal count every database of the cluster: on a machine
where other databases are busy, a difference of positions around a measure counts their
writes too. Here the records between two positions are read from the log and kept only if
they touch a relation of the measured database, or belong to a transaction that did (its
commit record). What is left is what the measure wrote, and the same run twice writes
nearly the same bytes, unlike its timings.

Full-page images (the first change of a page after a checkpoint) are counted apart: they
depend on when the server last checkpointed, not on the statements.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# The record types that put one entry into an index: a leaf insert (or its posting-list
# form), and a page split, which logs the new entry with the split.
INDEX_ENTRY_TYPES = {"INSERT_LEAF", "INSERT_POST", "SPLIT_L", "SPLIT_R"}


@dataclass
class Wal:
    """What a span of the log holds for one database."""

    bytes: int = 0
    fpi_bytes: int = 0
    records: Counter[str] = field(default_factory=Counter)
    # Bytes by kind of record, full-page images left out.
    kind_bytes: Counter[str] = field(default_factory=Counter)

    @property
    def index_entries(self) -> int:
        return sum(n for kind, n in self.records.items() if kind.split("/")[-1] in INDEX_ENTRY_TYPES)

    def add(self, other: Wal) -> Wal:
        return Wal(
            self.bytes + other.bytes,
            self.fpi_bytes + other.fpi_bytes,
            self.records + other.records,
            self.kind_bytes + other.kind_bytes,
        )

    @property
    def without_fpi(self) -> int:
        """The bytes the statements wrote, whenever the last checkpoint was."""
        return self.bytes - self.fpi_bytes


def available(cursor: Any) -> bool:
    """Install pg_walinspect in this database if the server has it (a superuser's right)."""
    cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_walinspect')")
    if not cursor.fetchone()[0]:
        return False
    cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    return True


def hold(cursor: Any) -> None:
    """Keep the server from recycling the log from here on, for as long as this session
    lasts (a temporary replication slot): a checkpoint during a long measure would otherwise
    remove the segments before they are read."""
    cursor.execute("SELECT pg_create_physical_replication_slot('lab_wal_' || pg_backend_pid(), true, true)")


def position(cursor: Any) -> int:
    """The current WAL insert position, as a byte offset."""
    cursor.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
    return int(cursor.fetchone()[0])


def _lsn(offset: int) -> str:
    return f"{offset >> 32:X}/{offset & 0xFFFFFFFF:X}"


def records(cursor: Any, start: int, end: int) -> list[tuple[int, int, int, str]]:
    """(position, bytes, full-page image bytes, "Rmgr/TYPE") of each record of this database
    between two positions, in order. Waits for the span to reach the disk (a claim commits
    without waiting for it), as the log can only be read up to there."""
    deadline = time.monotonic() + 10
    while True:
        cursor.execute("SELECT pg_current_wal_flush_lsn() - '0/0'::pg_lsn")
        if int(cursor.fetchone()[0]) >= end or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    cursor.execute(
        """
        WITH r AS MATERIALIZED (
            SELECT start_lsn, xid, resource_manager || '/' || record_type AS kind, record_length,
                   fpi_length, block_ref ~ (' rel [0-9]+/' || d.oid || '/') AS ours
            FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn),
                 (SELECT oid FROM pg_database WHERE datname = current_database()) AS d
        ), xids AS (
            SELECT DISTINCT xid FROM r WHERE ours AND xid <> '0'
        )
        SELECT start_lsn - '0/0'::pg_lsn, record_length, fpi_length, kind
        FROM r
        WHERE ours OR (kind LIKE 'Transaction/%%' AND xid IN (SELECT xid FROM xids))
        ORDER BY start_lsn
        """,
        {"start": _lsn(start), "end": _lsn(end)},
    )
    return [(int(at), int(size), int(fpi), kind) for at, size, fpi, kind in cursor.fetchall()]


def between(cursor: Any, start: int, end: int) -> Wal:
    """The WAL this database wrote between two positions."""
    return summarise(records(cursor, start, end))


def summarise(rows: list[tuple[int, int, int, str]]) -> Wal:
    wal = Wal()
    for _, size, fpi, kind in rows:
        wal.bytes += size
        wal.fpi_bytes += fpi
        wal.records[kind] += 1
        wal.kind_bytes[kind] += size - fpi
    return wal
