"""Errors of the notifications app."""


class NotificationsError(Exception):
    """Base class of every error the notifications app raises."""


class UnknownTemplate(NotificationsError):
    """No email template of that name is registered."""


class BadVariables(NotificationsError):
    """The variables given to a template are not the ones it declares."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{name}: {problem}" for name, problem in sorted(errors.items())))
        self.errors = errors


class PermanentFailure(NotificationsError):
    """The provider refused the message for good (an SMTP 5xx on the recipient or the
    content, anymail's rejected or invalid status): sending it again cannot succeed."""


class ProviderBusy(NotificationsError):
    """The provider asked us to come back later (HTTP 429 or 503 with Retry-After)."""

    def __init__(self, message: str, *, after: float):
        super().__init__(message)
        self.after = after
