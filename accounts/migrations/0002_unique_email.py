"""Email addresses are unique across users, ignoring case (empty ones excepted: operators
may make users without one). Django's User model cannot declare this, so it is an index on
its table; signup relies on it when two requests race for one address."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE UNIQUE INDEX accounts_user_email_ci ON auth_user (lower(email)) WHERE email <> ''",
            "DROP INDEX accounts_user_email_ci",
        ),
    ]
