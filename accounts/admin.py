"""Operators' pages for accounts: users with their verification state, API tokens (issued
for oneself, or for others with ``accounts.issue_token_for_others``, never for someone who
holds more than the issuer).

Actions are services calls, and each one leaves an entry in Django's admin log (the
history of each user or token), as the admin's own add/change/delete do.
"""

from __future__ import annotations

from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import ngettext

from jobs.console.moments import moment_column

from . import services
from .models import Account, ApiToken

User = get_user_model()


class VerifiedFilter(admin.SimpleListFilter):
    title = "email verified"
    parameter_name = "verified"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Verified"), ("no", "Not verified")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        unverified = Q(account__isnull=False, account__email_verified_at__isnull=True)
        if self.value() == "yes":
            return queryset.exclude(unverified)
        if self.value() == "no":
            return queryset.filter(unverified)
        return queryset


class AccountInline(admin.StackedInline):
    model = Account
    can_delete = False
    verbose_name_plural = "signup"
    fields = ("email_verified_at", "email_generation", "link_requested_at")
    readonly_fields = ("email_generation", "link_requested_at")


class UniqueEmailChangeForm(UserChangeForm):
    def clean_email(self) -> str:
        email = (self.cleaned_data.get("email") or "").strip()
        if email and User.objects.filter(email__iexact=email).exclude(pk=self.instance.pk).exists():
            raise forms.ValidationError("Another user has this email address.")
        return email


admin.site.unregister(User)


@admin.register(User)
class AccountUserAdmin(UserAdmin):
    form = UniqueEmailChangeForm
    list_display = ("username", "email", "email_verified", "is_staff", "is_active", "joined")
    list_filter = (VerifiedFilter, "is_staff", "is_superuser", "is_active")
    inlines = [AccountInline]
    actions = ["resend_verification"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("account")

    joined = moment_column("date_joined", "Joined")

    @admin.display(description="Email verified", boolean=True)
    def email_verified(self, user: Any) -> bool:
        account = getattr(user, "account", None)
        return account is None or account.email_verified_at is not None

    @admin.action(description="Re-send verification email", permissions=["change"])
    def resend_verification(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        sent = 0
        for user in queryset.exclude(email=""):
            job_id = services.resend_verification(user=user)
            self.log_change(request, user, f"Re-sent the verification email (job {job_id}).")
            sent += 1
        self.message_user(
            request,
            ngettext("Queued %(count)d verification email.", "Queued %(count)d verification emails.", sent)
            % {"count": sent},
            messages.SUCCESS,
        )


ISSUE_FOR_OTHERS = "accounts.issue_token_for_others"


def token_issue_refusal(*, issuer: Any, owner: Any) -> str | None:
    """Why ``issuer`` may not issue a token that acts as ``owner``, or None. A token is its
    owner's every right, so issuing one for someone else needs its own permission and never
    hands the issuer more than they hold."""
    if owner.pk == issuer.pk:
        return None
    if not issuer.has_perm(ISSUE_FOR_OTHERS):
        return "You may issue tokens only for yourself."
    if issuer.is_superuser:
        return None
    if owner.is_superuser:
        return f"{owner} is a superuser; only a superuser may issue a token for them."
    lacking = sorted(owner.get_all_permissions() - issuer.get_all_permissions())
    if lacking:
        shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
        return f"{owner} holds permissions you do not ({shown}); you may not issue a token for them."
    return None


class ApiTokenForm(forms.ModelForm):
    # Who is issuing: set by ApiTokenAdmin.get_form for each request.
    issuer: Any = None

    class Meta:
        model = ApiToken
        fields = ("user", "name")

    def clean_user(self) -> Any:
        owner = self.cleaned_data["user"]
        refusal = token_issue_refusal(issuer=self.issuer, owner=owner)
        if refusal:
            raise forms.ValidationError(refusal)
        return owner


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ("name", "user", "prefix", "created", "last_used", "revoked")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("name", "prefix", "user__username", "user__email")
    autocomplete_fields = ("user",)
    actions = ["revoke"]

    created = moment_column("created_at", "Created")
    last_used = moment_column("last_used_at", "Last used")
    revoked = moment_column("revoked_at", "Revoked")

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is None:
            return ("user", "name")
        return ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        return () if obj is None else self.get_fields(request, obj)

    def get_form(
        self, request: HttpRequest, obj: ApiToken | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"issuer": request.user})

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"user": request.user.pk, **super().get_changeform_initial_data(request)}

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user" and not request.user.has_perm(ISSUE_FOR_OTHERS):
            kwargs["queryset"] = User.objects.filter(pk__in=[request.user.pk])
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        # Kept on the request for response_add, the one page that shows it.
        request._api_token_secret = services.issue_api_token(token=obj)  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        # The admin's views are never cached (Cache-Control: no-store), this page included.
        return TemplateResponse(
            request,
            "admin/accounts/apitoken/created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "token": obj,
                "secret": request._api_token_secret,  # type: ignore[attr-defined]
                "title": "API token created",
            },
        )

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        tokens = list(queryset.filter(revoked_at__isnull=True))
        services.revoke_api_tokens(tokens=ApiToken.objects.filter(pk__in=[t.pk for t in tokens]))
        for token in tokens:
            self.log_change(request, token, "Revoked the token.")
        self.message_user(
            request,
            ngettext("Revoked %(count)d token.", "Revoked %(count)d tokens.", len(tokens))
            % {"count": len(tokens)},
            messages.SUCCESS,
        )


if admin.site.is_registered(AccessAttempt):
    admin.site.unregister(AccessAttempt)

    @admin.register(AccessAttempt)
    class LoginAttemptAdmin(AccessAttemptAdmin):
        """django-axes' page of failed logins. Its clean-up deletes rows, so here it needs the
        delete permission and logs each row it deletes, as Django's own delete does. (Axes'
        version also reads a login request's attempt time, which an admin request lacks.)"""

        @admin.action(description="Clean up expired attempts", permissions=["delete"])
        def cleanup_expired_attempts(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
            # Expired whatever the selection: older than the cool-off, so no longer counted.
            expired = AccessAttempt.objects.filter(
                attempt_time__lte=timezone.now() - settings.AXES_COOLOFF_TIME
            )
            self.log_deletions(request, expired)
            count, _ = expired.delete()
            self.message_user(
                request,
                ngettext(
                    "Cleaned up %(count)d expired access attempt.",
                    "Cleaned up %(count)d expired access attempts.",
                    count,
                )
                % {"count": count},
                messages.SUCCESS,
            )
