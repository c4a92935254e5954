from django.urls import path

from .console import views
from .workflows import api as workflow_api

app_name = "jobs"
urlpatterns = [
    path("jobs/<uuid:job_id>", views.job_status, name="job-status"),
    path("workflows/<uuid:workflow_id>/signals/<str:name>", workflow_api.signal, name="workflow-signal"),
    path("jobs/<uuid:job_id>/file", views.job_file, name="job-file"),
]
