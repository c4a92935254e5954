"""The site's account forms. None of them says whether an address has an account."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm, SetPasswordForm, UserCreationForm
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html

from . import services
from .backends import unverified_login
from .selectors import normalize_email


class SignupForm(UserCreationForm):
    """Username, email, password twice, with Django's password validators and username
    rules. The address is not checked for an existing account: that is the service's to
    handle without telling (see services.signup)."""

    email = forms.EmailField(
        max_length=254,
        help_text="We send a link to this address; open it to finish signing up.",
        widget=forms.EmailInput(attrs={"autocomplete": "email"}),
    )

    class Meta(UserCreationForm.Meta):
        model = User
        fields = ("email", "username")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["email"].widget.attrs["autofocus"] = True
        self.fields["username"].widget.attrs.pop("autofocus", None)
        self.fields["username"].help_text = "Up to 150 characters: letters, digits and @ . + - _ only."

    def clean_email(self) -> str:
        return normalize_email(self.cleaned_data["email"])

    def clean_username(self) -> str:
        # A username any earlier signup asked for is held, whatever account its address had.
        username = super().clean_username()
        if username and services.username_held(username):
            raise ValidationError(self.instance.unique_error_message(User, ["username"]))
        return username

    def signup(self, *, client_ip: str) -> None:
        """Sign up with the cleaned data (CooldownActive if this client signed up just now)."""
        try:
            services.signup(
                email=self.cleaned_data["email"],
                username=self.cleaned_data["username"],
                password=self.cleaned_data["password1"],
                client_ip=client_ip,
            )
        except services.UsernameTaken:
            self.add_error("username", "A user with that username already exists.")
            raise


class ResendForm(forms.Form):
    email = forms.EmailField(
        max_length=254,
        label="Email address",
        widget=forms.EmailInput(attrs={"autocomplete": "email", "autofocus": True}),
    )


class LoginForm(AuthenticationForm):
    """Django's login form, by username or email address. A person whose address is not
    verified yet is told so (only when their password is right) and how to get a link."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That username or email address and password do not match an account.",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        username = self.fields["username"]
        assert isinstance(username, forms.CharField)
        username.label = "Username or email address"
        username.max_length = 254
        self.fields["username"].widget.attrs.update(maxlength=254, autocomplete="username")

    def get_invalid_login_error(self) -> ValidationError:
        # Not while locked out: the lockout must not be a way to test passwords. The backend
        # has checked the password already; checking it again here would make a wrong
        # password for an unverified account cost two hashes, and so tell it apart.
        if not getattr(self.request, "axes_locked_out", False) and unverified_login(self.request):
            return ValidationError(
                format_html(
                    'Your email address is not confirmed yet. Open the link we sent you, or <a href="{}">'
                    "send me a new link</a>.",
                    reverse("accounts:resend"),
                ),
                code="unverified",
            )
        return super().get_invalid_login_error()


class ResetRequestForm(PasswordResetForm):
    """Django's reset form; the email is sent by a job that makes the link when it runs."""

    def save(self, *args: Any, client_ip: str = "", **kwargs: Any) -> None:
        """Ask for the reset email (CooldownActive if this client asked just now)."""
        services.request_password_reset(email=self.cleaned_data["email"], client_ip=client_ip)


class ResetPasswordForm(SetPasswordForm):
    """Setting a new password through an emailed link also proves the address."""

    def save(self, commit: bool = True) -> Any:
        user = super().save(commit=commit)
        if commit:
            services.password_reset_done(user=user)
        return user
