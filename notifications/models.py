from .push.models import Device, PushDelivery, PushNotification  # noqa: F401 - registers push models
