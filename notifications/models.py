"""The notifications app's models, one module per channel; Django finds them here."""

from .email.models import DeliveryStatus, EmailDelivery
from .push.models import Device, PushDelivery, PushNotification

__all__ = ["DeliveryStatus", "Device", "EmailDelivery", "PushDelivery", "PushNotification"]
