from django.apps import AppConfig


class DemosConfig(AppConfig):
    name = "demos"
    verbose_name = "Workflow demos"
