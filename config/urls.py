from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from accounts import api as accounts_api
from accounts import views as accounts_views
from jobs.metrics import metrics_view
from notifications.email import api as email_api
from notifications.email import views as email_views

# The admin's modules are discovered here, not at start-up (config/apps.py).
admin.autodiscover()

urlpatterns = [
    path("", accounts_views.home, name="home"),
    # Browsers ask every site for /favicon.ico (the admin's pages name no icon).
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("accounts/", include("accounts.urls")),
    # The console's dashboard moved into the admin's own routes (jobs.console.actions); the old
    # address, kept for bookmarks, sends there. Before the admin's routes, which would 404 it.
    path(
        "admin/jobs/dashboard/",
        RedirectView.as_view(pattern_name="admin:jobs_job_dashboard", query_string=True),
        name="jobs-dashboard",
    ),
    # Email kept by the development outbox backend (404 when mail goes to a real server).
    path("admin/outbox/", admin.site.admin_view(email_views.outbox_page), name="email-outbox"),
    path("admin/", admin.site.urls),
    # Prometheus, with the bearer METRICS_TOKEN (404 while it is unset).
    path("metrics", metrics_view, name="metrics"),
    path("api/signup", accounts_api.signup, name="api-signup"),
    path("api/signup/resend", accounts_api.resend, name="api-signup-resend"),
    # Before jobs.urls: "email" is not a job id, but keep the literal route first anyway.
    path("api/jobs/email", email_api.send_email, name="api-email"),
    path("", include("reports.urls")),
    path("api/", include("jobs.urls")),
    path("api/", include("notifications.push.urls")),
]
