"""Production backend: iOS devices through APNs, Android devices through FCM.

Each provider is built on first use from ``settings.PUSH``, so a deployment with only one
of them configured works, and a missing setting is a clear error on the jobs that need it.
"""

from __future__ import annotations

from ..conf import push_settings
from ..models import Platform
from .apns import APNsProvider
from .base import PushBackend, PushMessage, SendResult
from .fcm import FCMProvider


class PlatformBackend(PushBackend):
    def __init__(self) -> None:
        self.apns: APNsProvider | None = None
        self.fcm: FCMProvider | None = None

    def send(self, message: PushMessage) -> SendResult:
        if message.platform == Platform.IOS:
            if self.apns is None:
                self.apns = APNsProvider.from_settings(push_settings())
            return self.apns.send(message)
        if self.fcm is None:
            self.fcm = FCMProvider.from_settings(push_settings())
        return self.fcm.send(message)

    def close(self) -> None:
        for provider in (self.apns, self.fcm):
            if provider is not None:
                provider.close()
        self.apns = self.fcm = None
