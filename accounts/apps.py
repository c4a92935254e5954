from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs.models import Catchup, Overlap
        from jobs.scheduler import ScheduleSpec, declare

        housekeeping = {"catchup": Catchup.LATEST, "overlap": Overlap.SKIP, "priority": -50}
        # Frees addresses held by signups that were never verified (a mistyped address).
        declare(
            ScheduleSpec(
                name="accounts.delete_unverified_signups",
                task="accounts.tasks.delete_unverified_signups",
                cron="*/30 * * * *",
                **housekeeping,
            )
        )
        declare(
            ScheduleSpec(
                name="accounts.prune_cooldowns",
                task="accounts.tasks.prune_cooldowns",
                cron="7 * * * *",
                **housekeeping,
            )
        )
