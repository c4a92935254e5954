"""The notifications app's console pages, one module per channel."""

from .email import admin as email_admin  # noqa: F401  (registers the delivery records)
from .push import admin as push_admin  # noqa: F401  (registers the push console)
