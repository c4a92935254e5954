"""Push backends, chosen by ``PUSH["BACKEND"]`` like Django's email backends.

``get_backend()`` gives this process's backend: built on first use, kept for every later
job (one long-lived HTTP/2 connection per provider and worker process), and built anew in
a forked child or after the settings change.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import push_settings
from ..exceptions import ProviderNotConfigured
from .base import Outcome, PushBackend, PushMessage, SendResult

__all__ = ["Outcome", "PushBackend", "PushMessage", "SendResult", "get_backend"]

_current: tuple[int, PushBackend] | None = None


def get_backend() -> PushBackend:
    global _current
    if _current is not None and _current[0] == os.getpid():
        return _current[1]
    # A backend inherited through fork shares its sockets with the parent: never reuse it.
    path = push_settings().BACKEND
    try:
        backend_class = import_string(path)
    except ImportError as exc:
        raise ProviderNotConfigured(f"PUSH_BACKEND {path!r} cannot be imported: {exc}") from exc
    backend = backend_class()
    _current = (os.getpid(), backend)
    return backend


def reset_backend() -> None:
    """Close this process's backend; the next get_backend() builds a new one."""
    global _current
    if _current is not None and _current[0] == os.getpid():
        _current[1].close()
    _current = None


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "PUSH":
        reset_backend()


setting_changed.connect(_reload)
