"""Login lockout: per account and address together, with a higher cap per address alone.

django-axes counts failed logins in AccessAttempt rows (one per username, IP and user
agent). Locking by address alone let anyone behind a shared NAT lock everyone out (five
wrong passwords for ``ghost`` kept the admin out with the right one); locking by username
alone let anyone lock any known account out from anywhere. So an account is locked only
from the address its wrong passwords came from (AXES_FAILURE_LIMIT), and an address that
sprays guesses over many usernames is capped as a whole at ACCOUNTS_LOGIN_IP_FAILURE_LIMIT.
"""

from __future__ import annotations

from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import QuerySet, Sum
from django.http import HttpRequest

# Set on the request when a lockout applies: "account" (this username from this address) or
# "address" (every username from this address); the lockout page says which.
LOCKOUT_SCOPE = "login_lockout_scope"


class LoginLockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with two thresholds: (username, IP) and IP alone."""

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        # Axes compares one count with one limit (AXES_FAILURE_LIMIT, the account's). The
        # address's count is shifted so that it reaches that limit exactly when it reaches
        # its own higher one: the answer is the failures counted toward the nearer lockout.
        recent = self._recent_from_address(request)
        account = _failures(recent.filter(username=get_client_username(request, credentials)))
        address = _failures(recent) - (address_failure_limit() - settings.AXES_FAILURE_LIMIT)
        if max(account, address) >= settings.AXES_FAILURE_LIMIT:
            setattr(request, LOCKOUT_SCOPE, "account" if account >= address else "address")
        return max(account, address)

    def reset_user_attempts(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        # A successful login forgives that account's failures from this address only: a
        # sprayer who owns one account must not wipe the address's count by logging in.
        username = get_client_username(request, credentials)
        deleted, _ = AccessAttempt.objects.filter(username=username, ip_address=_address(request)).delete()
        return deleted

    def _recent_from_address(self, request: HttpRequest) -> QuerySet[AccessAttempt]:
        return AccessAttempt.objects.filter(
            ip_address=_address(request), attempt_time__gte=get_cool_off_threshold(request)
        )


def address_failure_limit() -> int:
    """Failed logins from one address, over all usernames, before the address is locked."""
    return max(settings.ACCOUNTS_LOGIN_IP_FAILURE_LIMIT, settings.AXES_FAILURE_LIMIT)


def _address(request: HttpRequest) -> str | None:
    # Set by axes' middleware and backend (through AXES_CLIENT_IP_CALLABLE) on every request.
    address: str | None = getattr(request, "axes_ip_address", None)
    return address


def _failures(attempts: QuerySet[AccessAttempt]) -> int:
    return attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
