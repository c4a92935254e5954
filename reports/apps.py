from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs.models import Catchup, Overlap
        from jobs.scheduler import ScheduleSpec, declare

        # Sundays at midnight in the site's time zone (JOBS["SCHEDULER_TIME_ZONE"], else
        # TIME_ZONE): last week's job activity, emailed to staff as a link.
        declare(
            ScheduleSpec(
                name="reports.weekly_job_activity",
                task="reports.tasks.weekly_report",
                cron="0 0 * * 0",
                catchup=Catchup.LATEST,
                overlap=Overlap.SKIP,
            )
        )
