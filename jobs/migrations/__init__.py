"""The engine's migrations name their own app by the label it is installed under, never by a
literal ``"jobs"``: a project that already has an app called ``jobs`` installs the engine with
a relabelled AppConfig (docs/how-to/add-to-your-project.md), and Django records and resolves
these migrations, their dependencies and their relations under that label. A new migration
written by ``makemigrations`` names ``"jobs"``; change it to APP_LABEL
(tests/process/test_relabel.py migrates under another label)."""

from collections.abc import Callable, Iterable
from typing import Any

from django.apps import apps

APP_LABEL = apps.get_containing_app_config(__name__).label


def function_loader(names: Iterable[str]) -> Callable[[Any, Any], None]:
    """A RunPython step that (re)creates the functions ``names`` from their files in
    jobs/sql/functions/ (jobs.store.statements.load_functions): the migrations that load
    them (0017 says how) name them in their FUNCTION_DIGESTS."""
    names = list(names)

    def load(apps: Any, schema_editor: Any) -> None:
        from jobs.store.statements import load_functions

        with schema_editor.connection.cursor() as cursor:
            load_functions(cursor, names)

    return load
