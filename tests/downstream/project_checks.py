"""Run by the downstream project's own Python (``python project_checks.py <step>``, from the
project's folder): each step prints one JSON line for the test to read. Nothing here imports
this repository; the engine comes from the installed wheel."""

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
sys.path.insert(0, os.getcwd())

import django

django.setup()


def enqueue() -> dict:
    from shop.tasks import add

    result = add.enqueue(2, 3)
    return {"id": str(result.id), "status": str(result.status)}


def result(job_id: str) -> dict:
    from shop.tasks import add

    found = add.get_result(job_id)
    return {"status": str(found.status), "return_value": found.return_value}


def console(job_id: str) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    user, _ = get_user_model().objects.get_or_create(
        username="ops", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    pages = {}
    for name in ("admin:jobs_job_changelist", "admin:jobs_job_dashboard"):
        response = client.get(reverse(name))
        pages[name] = {"status": response.status_code, "lists_job": job_id[:8] in response.content.decode()}
    return pages


def fires() -> dict:
    from jobs.models import FireRecord, Job

    return {
        "fires": FireRecord.objects.filter(schedule__name="shop.add").count(),
        "jobs": Job.objects.filter(task_path="shop.tasks.add").count(),
    }


if __name__ == "__main__":
    step, *arguments = sys.argv[1:]
    print(json.dumps(globals()[step](*arguments)))
