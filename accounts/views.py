"""The site's account pages: signup, check your email, confirm, new link, and Django's
login, logout and password-reset views with our forms and templates."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_http_methods

from web.clientip import client_ip

from . import selectors, services
from .exceptions import CooldownActive, InvalidVerificationLink
from .forms import LoginForm, ResendForm, ResetPasswordForm, ResetRequestForm, SignupForm


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            form.signup(client_ip=client_ip(request))
        except services.UsernameTaken:
            pass  # the form carries the error now
        except CooldownActive as exc:
            return _too_soon(request, "accounts/signup.html", form, exc)
        else:
            return redirect("accounts:signup_done")
    return render(request, "accounts/signup.html", {"form": form})


def signup_done(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/signup_done.html")


@require_http_methods(["GET", "POST"])
def verify(request: HttpRequest) -> HttpResponse:
    """GET shows a button; only its POST verifies, so mail scanners that fetch every link
    in a message do not confirm addresses on their own.

    The link carries the user and token in its query string (``?u=...&t=...``) and the
    button posts them in the body: Django's request logging and the access-log format of
    scripts/run record paths without the query, so the token reaches no log line."""
    source = request.POST if request.method == "POST" else request.GET
    uidb64, token = source.get("u", ""), source.get("t", "")
    if request.method == "POST":
        try:
            services.verify_email(uidb64=uidb64, token=token)
        except InvalidVerificationLink:
            return _invalid_link(request)
        messages.success(request, "Your email address is confirmed. You can log in now.")
        return redirect("accounts:login")
    user = selectors.user_for_verification(uidb64=uidb64, token=token)
    if user is None:
        return _invalid_link(request)
    return render(
        request,
        "accounts/verify_confirm.html",
        # The username too: someone else may have signed up with this address first.
        {"email": user.email, "username": user.get_username(), "uid": uidb64, "token": token},
    )


@require_http_methods(["GET", "POST"])
def resend(request: HttpRequest) -> HttpResponse:
    form = ResendForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.request_signup_email(email=form.cleaned_data["email"], client_ip=client_ip(request))
        except CooldownActive as exc:
            return _too_soon(request, "accounts/resend.html", form, exc)
        return redirect("accounts:signup_done")
    return render(request, "accounts/resend.html", {"form": form})


def _too_soon(request: HttpRequest, template: str, form: BaseForm, exc: CooldownActive) -> HttpResponse:
    """The form again, 429 with Retry-After: this client (or this address) asked just now."""
    form.add_error(
        None, f"That was asked for a moment ago. Please wait {exc.retry_after} seconds and try again."
    )
    response = render(request, template, {"form": form}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


def _invalid_link(request: HttpRequest) -> HttpResponse:
    # One page for every kind of bad link: which kind it was is nobody's business.
    return render(request, "accounts/verify_invalid.html", {"form": ResendForm()}, status=400)


class LoginView(auth_views.LoginView):
    form_class = LoginForm
    template_name = "accounts/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    template_name = "accounts/logged_out.html"


class PasswordResetView(auth_views.PasswordResetView):
    form_class = ResetRequestForm
    template_name = "accounts/password_reset_form.html"
    success_url = reverse_lazy("accounts:password_reset_done")

    def form_valid(self, form: ResetRequestForm) -> HttpResponse:  # type: ignore[override]
        try:
            form.save(client_ip=client_ip(self.request))
        except CooldownActive as exc:
            return _too_soon(self.request, self.template_name, form, exc)
        return redirect(self.get_success_url())


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "accounts/password_reset_done.html"


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """Django's confirm view, also at the emailed link ``/accounts/password/reset/confirm/
    ?u=...&t=...``: a good token goes into the session and the browser on to Django's
    ``.../set-password/`` page, as Django does, so no URL path ever holds it (paths are what
    request and access logs record)."""

    form_class = ResetPasswordForm
    template_name = "accounts/password_reset_confirm.html"
    success_url = reverse_lazy("accounts:password_reset_complete")

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if "token" not in kwargs:
            uidb64, token = request.GET.get("u", ""), request.GET.get("t", "")
            user = self.get_user(uidb64)
            if user is not None and self.token_generator.check_token(user, token):
                request.session[auth_views.INTERNAL_RESET_SESSION_TOKEN] = token
                return redirect("accounts:password_reset_confirm", uidb64=uidb64, token=self.reset_url_token)
            kwargs = {"uidb64": uidb64, "token": ""}  # Django's "link does not work" page
        return super().dispatch(request, *args, **kwargs)


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "accounts/password_reset_complete.html"
