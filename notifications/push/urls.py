from django.urls import path

from . import api

app_name = "push"
urlpatterns = [
    path("devices", api.devices, name="devices"),
    path("devices/<int:device_id>", api.device_detail, name="device-detail"),
]
