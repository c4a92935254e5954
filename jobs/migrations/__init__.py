"""The engine's migrations name their own app by the label it is installed under, never by a
literal ``"jobs"``: a project that already has an app called ``jobs`` installs the engine with
a relabelled AppConfig (docs/how-to/add-to-your-project.md), and Django records and resolves
these migrations, their dependencies and their relations under that label. A new migration
written by ``makemigrations`` names ``"jobs"``; change it to APP_LABEL
(tests/process/test_relabel.py migrates under another label)."""

from django.apps import apps

APP_LABEL = apps.get_containing_app_config(__name__).label
