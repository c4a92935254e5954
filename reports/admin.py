from django.contrib import admin

from jobs.console.moments import moment_column

from .models import Customer, Import


@admin.register(Customer)
class CustomerAdmin(admin.ModelAdmin):
    list_display = ("name", "email", "phone", "country", "owner", "updated")
    list_filter = ("country",)
    search_fields = ("name", "email", "phone")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)
    readonly_fields = ("created_at", "updated_at")

    updated = moment_column("updated_at", "Updated")


@admin.register(Import)
class ImportAdmin(admin.ModelAdmin):
    """Imports are written by their jobs: shown here, not edited."""

    list_display = (
        "filename",
        "owner",
        "status",
        "rows_done",
        "total_rows",
        "inserted",
        "updated",
        "rejected",
        "unread",
    )
    list_filter = ("status",)
    list_select_related = ("owner",)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False
