"""Errors of the push notifications package."""


class PushError(Exception):
    """Base class of every error raised by notifications.push."""


class InvalidDevice(PushError, ValueError):
    """A device registration that cannot be stored; ``errors`` maps fields to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{field}: {' '.join(messages)}" for field, messages in errors.items()))
        self.errors = errors


class InvalidNotification(PushError, ValueError):
    """A notification that no provider would accept: bad title, body, data or expiry."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        # The argument at fault, for forms that show the error next to it.
        self.field = field


class PayloadTooLarge(InvalidNotification):
    """The notification's payload is over a provider's size limit."""


class ProviderNotConfigured(PushError):
    """The backend needs a setting (key file, key id, topic...) that is missing or unusable."""


class ProviderAuthFailed(PushError):
    """The provider refused our credentials even after refreshing them once."""


class ProviderMisconfigured(PushError):
    """The provider's answer says our settings are wrong (base URL, topic, project)."""
