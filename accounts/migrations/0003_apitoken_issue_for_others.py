"""A permission to issue API tokens for other users: adding a token is otherwise for oneself."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_unique_email"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="apitoken",
            options={
                "permissions": [("issue_token_for_others", "Can issue API tokens for other users")],
                "verbose_name": "API token",
            },
        ),
    ]
