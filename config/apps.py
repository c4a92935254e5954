"""The project's own configuration of Django's admin."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import autodiscover
from django.contrib.admin.apps import SimpleAdminConfig
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks

from config.startup import resume_collector


class AdminConfig(SimpleAdminConfig):
    """Django's admin, with its modules discovered where the admin is used instead of at
    start-up: by the URLconf (config/urls.py) and by the system checks. ``runworker`` and
    ``runscheduler`` never load either, so they do not import every app's admin module, the
    console's and the forms they pull in (a third of a worker's start-up)."""

    def ready(self) -> None:
        # The first app's ready(): every model is loaded, start-up's garbage collector
        # pause (manage.py, config/wsgi.py) can end.
        resume_collector()
        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(_check_admin_app, checks.Tags.admin)


def _check_admin_app(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    autodiscover()
    return check_admin_app(app_configs, **kwargs)
