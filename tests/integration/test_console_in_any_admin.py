"""The console in a site that mounts nothing of ours but Django's admin: its templates come
from the engine (not this project's templates/ folder) and its pages, the dashboard included,
are the admin's own routes."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.contrib import admin
from django.test import Client
from django.urls import path, reverse

from tests.support import factories

pytestmark = pytest.mark.django_db

# A downstream site's whole URLconf (this module is ROOT_URLCONF in the tests below). Django's
# default AdminConfig discovers the admin modules at start-up; this project's settings leave
# that to config/urls.py, so do it here as a stock site would have.
admin.autodiscover()
urlpatterns = [path("admin/", admin.site.urls)]


@pytest.fixture
def admin_only_site(client: Client, django_user_model, settings) -> Client:
    settings.ROOT_URLCONF = __name__
    # Only the engine's app templates: this project's own folder is not on the path.
    settings.TEMPLATES = [{**django_settings.TEMPLATES[0], "DIRS": []}]
    client.force_login(django_user_model.objects.create(username="ops", is_staff=True, is_superuser=True))
    return client


def test_the_list_detail_and_dashboard_render_with_only_the_admin_mounted(
    admin_only_site: Client,
) -> None:
    job = factories.job()
    dashboard = reverse("admin:jobs_job_dashboard")
    assert dashboard == "/admin/jobs/job/dashboard/"

    listing = admin_only_site.get(reverse("admin:jobs_job_changelist"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert str(job.pk)[:8] in page
    assert f'href="{dashboard}"' in page

    detail = admin_only_site.get(reverse("admin:jobs_job_change", args=[job.pk]))
    assert detail.status_code == 200
    assert f'href="{dashboard}"' in detail.content.decode()

    board = admin_only_site.get(dashboard)
    assert board.status_code == 200
    assert b"Jobs dashboard" in board.content
    assert admin_only_site.get(dashboard + "?part=body").status_code == 200


def test_the_dashboard_needs_a_logged_in_staff_user(client: Client, settings) -> None:
    settings.ROOT_URLCONF = __name__
    response = client.get(reverse("admin:jobs_job_dashboard"))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_this_sites_old_dashboard_address_sends_to_the_admins(client: Client) -> None:
    response = client.get("/admin/jobs/dashboard/?part=body")
    assert response.status_code == 302
    assert response["Location"] == "/admin/jobs/job/dashboard/?part=body"
