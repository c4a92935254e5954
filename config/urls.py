from django.contrib import admin
from django.urls import include, path

from accounts import api as accounts_api
from accounts import views as accounts_views
from notifications.email import api as email_api

urlpatterns = [
    path("", accounts_views.home, name="home"),
    path("accounts/", include("accounts.urls")),
    path("admin/", admin.site.urls),
    path("api/signup", accounts_api.signup, name="api-signup"),
    path("api/signup/resend", accounts_api.resend, name="api-signup-resend"),
    # Before jobs.urls: "email" is not a job id, but keep the literal route first anyway.
    path("api/jobs/email", email_api.send_email, name="api-email"),
    path("", include("reports.urls")),
    path("api/", include("jobs.urls")),
    path("api/", include("notifications.push.urls")),
]
