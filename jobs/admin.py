"""Django's admin autodiscovery imports this module; the console lives in jobs/console/."""

from .console import admin  # noqa: F401
