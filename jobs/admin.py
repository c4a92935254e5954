"""Django's admin autodiscovery imports this module: the console's pages (jobs/console/) and
the schedule and workflow pages, which live with their subsystems and use the console's
pieces (so the console does not import them back)."""

from .console import admin as console_admin  # noqa: F401
from .scheduler import admin as schedule_admin  # noqa: F401
from .workflows import admin as workflow_admin  # noqa: F401
