from django.db import migrations, models
from jobs.migrations import APP_LABEL


class Migration(migrations.Migration):
    dependencies = [
        (APP_LABEL, "0012_workflows"),
    ]

    operations = [
        # Nullable without a default: adding it rewrites no row.
        migrations.AddField(
            model_name="job",
            name="progress",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
