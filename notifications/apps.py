from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registering the system checks of each channel.
        from .email import checks as email_checks  # noqa: F401
        from .push import checks as push_checks  # noqa: F401
