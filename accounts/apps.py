from typing import Any

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs.scheduler import declare

        # Frees addresses held by signups that were never verified (a mistyped address).
        declare(housekeeping("accounts.delete_unverified_signups", cron="*/30 * * * *"))
        declare(housekeeping("accounts.prune_cooldowns", cron="7 * * * *"))


def housekeeping(name: str, *, cron: str) -> Any:
    """A low-priority schedule of the task named like it, that never piles up runs."""
    from jobs.models import Catchup, Overlap
    from jobs.scheduler import ScheduleSpec

    return ScheduleSpec(
        name=name,
        task=name.replace(".", ".tasks.", 1),
        cron=cron,
        catchup=Catchup.LATEST,
        overlap=Overlap.SKIP,
        priority=-50,
    )
