from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("jobs/<uuid:job_id>", views.job_status, name="job-status"),
    path("jobs/<uuid:job_id>/file", views.job_file, name="job-file"),
]
