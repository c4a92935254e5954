"""Delivery records in the console: read-only, filterable by purpose and status."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from jobs.console.moments import moment_column

from .models import EmailDelivery


@admin.register(EmailDelivery)
class EmailDeliveryAdmin(admin.ModelAdmin):
    # The provider's message id is on the detail page (and searchable): too long to list.
    list_display = ("created", "purpose", "to_address", "status", "attempts", "short_error")
    list_filter = ("purpose", "status", "template")
    search_fields = ("to_address", "=message_key", "=provider_message_id", "=job_id")
    ordering = ("-created_at",)
    date_hierarchy = "created_at"
    show_full_result_count = False
    fields = (
        "message_key", "purpose", "template", "to_address", "user", "owner", "request_key", "variables",
        "status", "attempts", "claimed_until", "job_id", "provider_message_id", "error",
        "created_at", "updated_at", "sent_at",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: EmailDelivery | None = None) -> bool:
        return False

    created = moment_column("created_at", "Created")

    @admin.display(description="Error")
    def short_error(self, delivery: EmailDelivery) -> str:
        return delivery.error if len(delivery.error) <= 80 else f"{delivery.error[:79]}…"
