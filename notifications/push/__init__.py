"""Push notifications: devices, deliveries, and the APNs and FCM providers.

``services.notify_user`` / ``notify_users`` write one delivery record per active device and
one ``send_push`` job per delivery (one bulk insert, in the caller's transaction). The job
sends through the backend named by ``PUSH["BACKEND"]`` (``providers/``) and records the
provider's answer on the delivery.
"""
