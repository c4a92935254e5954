"""What the rest of the project calls to notify people: the push entry points, re-exported so
callers need not know the package layout (``from notifications.services import notify_user``)."""

from notifications.push.services import notify_user, notify_users

__all__ = ["notify_user", "notify_users"]
