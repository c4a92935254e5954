"""What the console's pages say, through Django's test client: the dashboard's worker load
in honest words, dates in one format, a workflow's deadline that names its day, and the
API-token page's breadcrumb as the admin's own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessLog
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from demos.workflows import start_payment_approval
from jobs.console.moments import deadline, moment
from jobs.models import Worker
from jobs.workflows.runs import Workflow
from tests.support import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create(username="ops", is_staff=True, is_superuser=True))
    return client


def test_a_workers_load_is_jobs_on_processes_not_a_fraction(admin_client: Client) -> None:
    # Two executor processes may run three jobs between them (threads, async handlers).
    Worker.objects.create(hostname="worker-a", pid=41, queues="default:1", concurrency=2, jobs_in_hand=3)
    Worker.objects.create(hostname="worker-b", pid=42, queues="default:1", concurrency=1, jobs_in_hand=1)
    body = admin_client.get(reverse("admin:jobs_job_dashboard") + "?part=body").content.decode()
    assert "3 jobs on 2 processes" in body and "1 job on 1 process" in body
    assert "3/2" not in body and "in hand" not in body
    listed = admin_client.get(reverse("admin:jobs_worker_changelist")).content.decode()
    assert "3 jobs on 2 processes" in listed


def test_dates_are_written_one_way_in_lists_the_dashboard_and_django_fields(admin_client: Client) -> None:
    started = timezone.now() - timedelta(days=3)
    Worker.objects.create(hostname="worker-a", pid=41, queues="default:1", concurrency=1, started_at=started)
    compact = moment(started)
    assert compact in admin_client.get(reverse("admin:jobs_job_dashboard")).content.decode()
    assert f">{compact}</time>" in admin_client.get(reverse("admin:jobs_worker_changelist")).content.decode()
    # Where Django writes a date itself (a read-only field, another app's list): the same
    # pattern, with the year.
    seen = AccessLog.objects.create(username="ops", ip_address="127.0.0.1", user_agent="test", path_info="/")
    written = timezone.localtime(seen.attempt_time)
    page = admin_client.get(reverse("admin:axes_accesslog_changelist")).content.decode()
    assert f"{written.day} {written:%b %Y %H:%M}" in page
    assert "a.m." not in page and "p.m." not in page


def test_a_workflow_waiting_until_tomorrow_says_tomorrow(admin_client: Client) -> None:
    run = start_payment_approval(order_id=5, amount_cents=700, timeout=24 * 3600)
    factories.run_due()
    wait = next(node for node in Workflow(run.id).nodes if node.kind == "signal")
    assert wait.state == "running" and wait.deadline is not None
    page = admin_client.get(reverse("admin:jobs_workflow_change", args=[run.id])).content.decode()
    shown = deadline(wait.deadline)
    assert shown.startswith("tomorrow ")
    assert f"until {shown}" in page  # the graph
    assert f"times out {shown}" in page  # the node table


def test_the_token_created_page_has_the_admins_breadcrumb(admin_client: Client, django_user_model) -> None:
    owner = django_user_model.objects.create_user("billing", "billing@example.com")
    page = admin_client.post(
        reverse("admin:accounts_apitoken_add"), {"user": owner.pk, "name": "billing service"}
    ).content.decode()
    assert "will not be shown again" in page
    assert '<ol class="breadcrumbs">' in page
    assert '<li aria-current="page">billing service</li>' in page
    assert '<div class="breadcrumbs">' not in page
