from django.urls import path

from . import api, views

app_name = "reports"
urlpatterns = [
    path("reports/", views.reports_page, name="reports"),
    path("imports/", views.imports_page, name="imports"),
    path("api/reports", api.create_report, name="api-reports"),
    path("api/imports", api.create_import, name="api-imports"),
    path("api/imports/<uuid:import_id>", api.import_status, name="api-import"),
]
