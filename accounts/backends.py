"""Login: by username or email address, and only once the address is verified."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest

from .selectors import is_verified, user_for_login

_UNVERIFIED_LOGIN = "_accounts_unverified_login"


class VerifiedAccountBackend(ModelBackend):
    """ModelBackend that takes a username or an email address in ``username`` and refuses
    users whose address is not verified (the site's and the admin's login alike)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any | None:
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None
        user = user_for_login(identifier=username)
        if user is None:
            # Hash anyway, so an unknown name takes as long as a wrong password.
            get_user_model()().set_password(password)
            return None
        if not user.check_password(password):
            return None
        if self.user_can_authenticate(user):
            return user
        if request is not None and user.is_active and not is_verified(user=user):
            # The login form says "not confirmed yet" from this, without a second hash.
            setattr(request, _UNVERIFIED_LOGIN, True)
        return None

    def user_can_authenticate(self, user: Any) -> bool:
        return super().user_can_authenticate(user) and is_verified(user=user)


def unverified_login(request: HttpRequest | None) -> bool:
    """Whether this request's login had the right password for an unverified account."""
    return bool(getattr(request, _UNVERIFIED_LOGIN, False))


def lockout_username(request: HttpRequest | None, credentials: dict[str, Any] | None) -> str | None:
    """The name django-axes counts failed logins under: the account's username whether the
    form was given the username or the address, so both count against one account."""
    identifier = (credentials or {}).get("username")
    if identifier is None and request is not None:
        identifier = request.POST.get("username")
    if not identifier:
        return identifier
    user = user_for_login(identifier=identifier)
    return user.get_username() if user is not None else identifier.strip().lower()
