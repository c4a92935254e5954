from .push import admin as push_admin  # noqa: F401 - registers the push console
