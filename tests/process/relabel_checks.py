"""Run with a settings module that installs the engine under another app label
(``python -m tests.process.relabel_checks <step> [args]``): each step prints one JSON line
for tests/process/test_relabel.py to read."""

import json
import sys

import django

django.setup()


def enqueue() -> dict:
    from tests.tasks.basic import add

    result = add.enqueue(2, 3)
    return {"id": str(result.id), "status": str(result.status)}


def result(job_id: str) -> dict:
    from tests.tasks.basic import add

    found = add.get_result(job_id)
    return {"status": str(found.status), "return_value": found.return_value}


def console(job_id: str) -> dict:
    """The console's pages as a superuser: each page's status and whether it shows the job."""
    from django.contrib.admin.templatetags.admin_urls import admin_urlname
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from jobs.models import Job

    setup_test_environment()  # the responses then name the templates they rendered
    opts = Job._meta
    user, _ = get_user_model().objects.get_or_create(
        username="ops", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    pages = {
        "changelist": reverse(admin_urlname(opts, "changelist")),
        "change": reverse(admin_urlname(opts, "change"), args=[job_id]),
        "dashboard": reverse(admin_urlname(opts, "dashboard")),
    }
    found = {}
    for page, url in pages.items():
        response = client.get(url)
        body = response.content.decode()
        found[page] = {
            "url": url,
            "status": response.status_code,
            "shows_job": job_id[:8] in body,
            "templates": [template.name for template in response.templates if template.name],
        }
    return {"app_label": opts.app_label, "pages": found}


if __name__ == "__main__":
    step, *arguments = sys.argv[1:]
    print(json.dumps(globals()[step](*arguments)))
