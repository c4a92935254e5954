"""The notifications app's models, one module per channel; Django finds them here."""

from .email.models import DeliveryStatus, EmailDelivery

__all__ = ["DeliveryStatus", "EmailDelivery"]
