"""Errors of the accounts app."""


class AccountsError(Exception):
    """Base class of every error the accounts app raises."""


class CooldownActive(AccountsError):
    """The same request was made too recently (per address or per client IP)."""

    def __init__(self, retry_after: int):
        super().__init__(f"asked too recently; try again in {retry_after} seconds")
        self.retry_after = retry_after


class InvalidVerificationLink(AccountsError):
    """A verification link that is expired, used, tampered with or not this user's."""
