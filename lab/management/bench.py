"""What every benchmark command shares: it empties tables, so it runs only on a database
whose name says it is for benchmarks (scripts/bench uses jobqueue_bench), unless --force."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import connection


def add_force_option(parser: CommandParser) -> None:
    parser.add_argument("--force", action="store_true", help="run even if the database name lacks 'bench'")


def require_bench_database(options: dict[str, Any], *, empties: str, suite: str) -> None:
    """Refuse a database not named *bench* (without --force): the run empties ``empties``."""
    name = connection.settings_dict["NAME"]
    if "bench" not in name and not options.get("force"):
        raise CommandError(
            f"the benchmark empties {empties}; database {name!r} does not look like a benchmark "
            f"database (use scripts/bench {suite}, or --force)"
        )
