"""Who a job belongs to: an opaque owner key stored on the row.

The engine knows nothing of the apps above it, so an owner is a string: a model instance
becomes ``"<app_label>.<model>:<pk>"`` (``"auth.user:42"``), and any other string (a tenant,
a service) is kept as given. Views compare the key of ``request.user`` with the row's.
"""

from __future__ import annotations

from typing import Any

# Longest owner key accepted at enqueue.
MAX_OWNER_LENGTH = 200


def owner_key(owner: Any) -> str:
    """The key stored in ``Job.owner`` for ``owner`` (a saved model instance or a string)."""
    if isinstance(owner, str):
        return owner
    meta = getattr(owner, "_meta", None)
    pk = getattr(owner, "pk", None)
    if meta is None or pk is None:
        raise TypeError(f"an owner is a saved model instance or a string, not {owner!r}")
    return f"{meta.label_lower}:{pk}"


def may_see(*, owner: str, public: bool, user: Any) -> bool:
    """Whether ``user`` (``request.user``, possibly anonymous) may read a job's details."""
    if getattr(user, "is_staff", False) and getattr(user, "is_active", False):
        return True
    if owner and getattr(user, "is_authenticated", False):
        return owner == owner_key(user)
    return False
