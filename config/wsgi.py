import os

from config.startup import pause_collector

pause_collector()  # until the apps are loaded: config/startup.py

from django.core.wsgi import get_wsgi_application  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
