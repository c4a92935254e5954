"""The push console: devices, notifications (compose, then watch their progress) and
delivery records with their provider answers and a link to each job."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import ngettext

from jobs.console.moments import moment_column, moment_html

from . import selectors, services
from .exceptions import InvalidNotification
from .forms import AUDIENCE_ALL, ComposeForm
from .models import Device, PushDelivery, PushNotification

# Deliveries listed on a notification's progress page (the rest are in the deliveries list).
PROGRESS_ROWS = 50


def job_link(job_id: Any) -> str:
    if not job_id:
        return "-"
    return format_html(
        '<a href="{}">{}</a>', reverse("admin:jobs_job_change", args=[job_id]), str(job_id)[:8]
    )


def short_time(value: datetime | None) -> str:
    """A time for list columns, as the console writes moments (jobs.console.moments)."""
    return moment_html(value)


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ("user", "platform", "short_token", "active", "last_seen", "deactivation_reason")
    list_filter = ("platform", "active")
    search_fields = ("user__username", "user__email", "=token")
    list_select_related = ("user",)
    ordering = ("-last_seen_at",)
    actions = ("deactivate", "reactivate")
    readonly_fields = (
        "user", "platform", "token", "app_id", "locale", "active", "created_at", "last_seen_at",
        "deactivated_at", "deactivation_reason",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Devices are registered by the apps, through the API.
        return False

    @admin.display(description="Token")
    def short_token(self, device: Device) -> str:
        return f"{device.token[:10]}…"

    @admin.display(description="Last seen", ordering="last_seen_at")
    def last_seen(self, device: Device) -> str:
        return short_time(device.last_seen_at)

    @admin.action(description="Deactivate selected devices", permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Device]) -> None:
        devices = list(queryset.filter(active=True))
        done = services.devices_deactivate(
            device_ids=[device.pk for device in devices], reason=f"deactivated by {request.user}"
        )
        for device in devices:
            self.log_change(request, device, "Deactivated the device.")
        self.message_user(
            request,
            ngettext("Deactivated %(count)d device.", "Deactivated %(count)d devices.", done)
            % {"count": done},
            messages.SUCCESS,
        )

    @admin.action(description="Reactivate selected devices", permissions=["change"])
    def reactivate(self, request: HttpRequest, queryset: QuerySet[Device]) -> None:
        devices = list(queryset.filter(active=False))
        done = services.devices_reactivate(device_ids=[device.pk for device in devices])
        for device in devices:
            self.log_change(request, device, "Reactivated the device.")
        self.message_user(
            request,
            ngettext("Reactivated %(count)d device.", "Reactivated %(count)d devices.", done)
            % {"count": done},
            messages.SUCCESS,
        )


@admin.register(PushDelivery)
class PushDeliveryAdmin(admin.ModelAdmin):
    list_display = ("created", "notification", "user", "outcome", "answer", "job")
    list_filter = ("status", "platform")
    search_fields = ("=id", "=job_id", "user__username", "=provider_id")
    list_select_related = ("notification", "user")
    ordering = ("-created_at",)
    show_full_result_count = False
    readonly_fields = (
        "id", "notification", "user", "device", "platform", "status", "outcome", "job", "attempts",
        "http_status", "reason", "provider_id", "created_at", "last_attempt_at", "sending_until",
        "finished_at",
    )  # fmt: skip
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[PushDelivery]:
        return selectors.with_job_state(super().get_queryset(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PushDelivery | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: PushDelivery | None = None) -> bool:
        # The record of what was sent: it goes with its notification, not on its own.
        return False

    @admin.display(description="Outcome")
    def outcome(self, delivery: PushDelivery) -> str:
        return selectors.outcome(
            status=delivery.status, job_state=getattr(delivery, "job_state", None), attempts=delivery.attempts
        )

    @admin.display(description="Created", ordering="created_at")
    def created(self, delivery: PushDelivery) -> str:
        return short_time(delivery.created_at)

    @admin.display(description="Provider answer")
    def answer(self, delivery: PushDelivery) -> str:
        return " ".join(str(part) for part in (delivery.http_status, delivery.reason) if part) or "-"

    @admin.display(description="Job")
    def job(self, delivery: PushDelivery) -> str:
        return job_link(delivery.job_id)


@admin.register(PushNotification)
class PushNotificationAdmin(admin.ModelAdmin):
    """Adding a notification is composing one: the add page sends it to the chosen users
    (one job per device) and the change page shows how its deliveries are doing."""

    list_display = ("title", "audience", "devices", "created_by", "created", "expires")
    change_list_template = "admin/push/notification_changelist.html"
    list_select_related = ("created_by",)
    search_fields = ("title",)
    ordering = ("-created_at",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[PushNotification]:
        return super().get_queryset(request).annotate(device_count=Count("deliveries"))

    created = moment_column("created_at", "Created")
    expires = moment_column("expires_at", "Expires")

    @admin.display(description="Devices", ordering="device_count")
    def devices(self, notification: PushNotification) -> int:
        return getattr(notification, "device_count", 0)

    def has_change_permission(self, request: HttpRequest, obj: PushNotification | None = None) -> bool:
        return False

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = ComposeForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            notification = self._send(request, form)
            if notification is not None:
                self.log_addition(request, notification, [{"added": {}}])
                return HttpResponseRedirect(
                    reverse("admin:notifications_pushnotification_change", args=[notification.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": "Compose notification",
            "opts": self.model._meta,
            "form": form,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/push/compose.html", context)

    def _send(self, request: HttpRequest, form: ComposeForm) -> PushNotification | None:
        data = form.cleaned_data
        if data["audience"] == AUDIENCE_ALL:
            users: Any = get_user_model().objects.filter(is_active=True)
            audience = "all active users"
        else:
            users = list(data["users"])
            audience = ", ".join(str(user) for user in users[:3]) + (
                f" and {len(users) - 3} more" if len(users) > 3 else ""
            )
        try:
            notification, deliveries = services.notification_send(
                users=users,
                title=data["title"],
                body=data["body"],
                data=data["data"],
                expires_at=data["expires_at"],
                collapse_key=data["collapse_key"],
                created_by=request.user,  # type: ignore[arg-type]
                audience=audience,
                keep_if_empty=True,
            )
        except InvalidNotification as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            return None
        self.message_user(
            request,
            ngettext("Enqueued %(count)d delivery job.", "Enqueued %(count)d delivery jobs.", len(deliveries))
            % {"count": len(deliveries)},
            messages.SUCCESS,
        )
        return notification

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        notification = self.get_object(request, object_id)
        if notification is None:
            raise Http404("no such notification")
        if not self.has_view_permission(request, notification):
            raise PermissionDenied
        progress = selectors.notification_progress(notification=notification)
        deliveries = selectors.with_job_state(
            notification.deliveries.select_related("user").order_by("created_at", "user_id", "device_id")
        )[:PROGRESS_ROWS]
        rows = [
            {
                "delivery": delivery,
                "outcome": selectors.outcome(
                    status=delivery.status,
                    job_state=getattr(delivery, "job_state", None),
                    attempts=delivery.attempts,
                ),
                "job": job_link(delivery.job_id),
            }
            for delivery in deliveries
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Notification: {notification.title}",
            "opts": self.model._meta,
            "original": notification,
            "notification": notification,
            "data_json": json.dumps(notification.data, ensure_ascii=False) if notification.data else "",
            "progress": progress,
            "percent": round(100 * progress.finished / progress.total) if progress.total else 100,
            "rows": rows,
            "more": max(0, progress.total - len(rows)),
            "deliveries_url": reverse("admin:notifications_pushdelivery_changelist")
            + f"?notification__id__exact={notification.pk}",
        }
        return TemplateResponse(request, "admin/push/progress.html", context)
