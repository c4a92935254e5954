"""The database's functions and triggers are the files in jobs/sql/functions/, as loaded by
the migrations: a reader of a file reads what the database runs."""

from __future__ import annotations

import hashlib
from importlib import import_module
from pathlib import Path

import pytest
from django.db import connection, transaction

from jobs.store.statements import function_names, function_source

pytestmark = pytest.mark.django_db

DEFINITIONS = """
SELECT 'function ' || p.proname, pg_get_functiondef(p.oid)
FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace
WHERE ns.nspname = current_schema() AND p.proname LIKE 'jobs\\_%%'
UNION ALL
SELECT 'trigger ' || t.tgname, pg_get_triggerdef(t.oid)
FROM pg_trigger t
WHERE t.tgrelid = 'jobs_job'::regclass AND NOT t.tgisinternal
"""


def definitions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(DEFINITIONS)
        return dict(cursor.fetchall())


def test_every_function_and_trigger_of_the_database_has_its_file() -> None:
    held = definitions()
    names = function_names()
    assert sorted(key.split(" ", 1)[1] for key in held if key.startswith("function ")) == names
    for key in held:
        kind, name = key.split(" ", 1)
        if kind == "trigger":
            assert name in names, f"trigger {name} has no file of its own"
            assert "CREATE OR REPLACE TRIGGER " + name in function_source(name)


@pytest.mark.parametrize("name", function_names())
def test_loading_a_file_again_changes_nothing(name: str) -> None:
    """The migrated database holds exactly each file's definition: running the file again
    leaves every definition as it was."""
    before = definitions()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(function_source(name))
        after = definitions()
        transaction.set_rollback(True)
    assert after == before
    assert f"function {name}" in after


def test_each_file_is_the_version_its_latest_migration_loaded() -> None:
    """A database migrated before a file changed keeps the old definition until a migration
    loads the file again: an edited file without such a migration fails here."""
    loaded: dict[str, str] = {}
    migrations = sorted(Path(import_module("jobs.migrations").__path__[0]).glob("0*.py"))
    for path in migrations:
        loaded.update(getattr(import_module(f"jobs.migrations.{path.stem}"), "FUNCTION_DIGESTS", {}))
    current = {
        name: hashlib.sha256(function_source(name).encode()).hexdigest()[:16] for name in function_names()
    }
    assert loaded == current
