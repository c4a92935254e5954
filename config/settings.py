"""Settings. Every knob is an environment variable with a safe default (see .env.example)."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key-change-me")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "jobs",
    "accounts",
    "notifications",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    # POSTGRES_PORT moves the default alone (scripts/run and scripts/test start a server there
    # when nothing answers: scripts/postgres.py).
    "default": env.db_url(
        "DATABASE_URL",
        default=f"postgres://postgres@127.0.0.1:{env.int('POSTGRES_PORT', default=5432)}/jobqueue",
    ),
}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=0))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# --- The job queue --------------------------------------------------------------------
JOBS_QUEUES = env.list("JOBS_QUEUES", default=["default", "email", "push", "low"])

TASKS = {
    "default": {
        "BACKEND": "jobs.backend.PostgresBackend",
        "QUEUES": JOBS_QUEUES,
    },
}

JOBS = {
    # How long a claim is valid before the reaper may take the job back (seconds).
    # Workers extend it every LEASE_SECONDS / 3 while the handler is alive.
    "LEASE_SECONDS": env.float("JOBS_LEASE_SECONDS", default=300.0),
    # Idle workers wake on NOTIFY; they poll this often anyway.
    "POLL_INTERVAL": env.float("JOBS_POLL_INTERVAL", default=2.0),
    # LISTEN/NOTIFY wake-ups. Turn off behind a pooler in transaction mode.
    "LISTEN": env.bool("JOBS_LISTEN", default=True),
    "DEFAULT_MAX_ATTEMPTS": env.int("JOBS_DEFAULT_MAX_ATTEMPTS", default=5),
    "BACKOFF_BASE": env.float("JOBS_BACKOFF_BASE", default=2.0),
    "BACKOFF_CAP": env.float("JOBS_BACKOFF_CAP", default=3600.0),
    # Hard time limit when a task sets none (seconds; 0 means no limit).
    "DEFAULT_TIMEOUT": env.float("JOBS_DEFAULT_TIMEOUT", default=0.0),
    # Largest args+kwargs payload accepted at enqueue, in bytes of JSON.
    "MAX_PAYLOAD_BYTES": env.int("JOBS_MAX_PAYLOAD_BYTES", default=64 * 1024),
    # A worker process takes more than one job per claim only while jobs finish fast:
    # it never holds more work than it expects to finish within this many seconds.
    "PREFETCH_HORIZON": env.float("JOBS_PREFETCH_HORIZON", default=0.05),
    "MAX_BATCH": env.int("JOBS_MAX_BATCH", default=200),
    # Per executor: async handlers running at once, and handler threads for blocking tasks
    # that wait on I/O (0: they run one at a time in the executor's main thread).
    "ASYNC_CONCURRENCY": env.int("JOBS_ASYNC_CONCURRENCY", default=50),
    "THREADS": env.int("JOBS_THREADS", default=0),
    # A job whose task does not import (a deploy rolling out) is retried, using no attempt,
    # for this long before it goes dead (seconds).
    "UNKNOWN_TASK_GRACE": env.float("JOBS_UNKNOWN_TASK_GRACE", default=600.0),
    "REAPER_INTERVAL": env.float("JOBS_REAPER_INTERVAL", default=30.0),
    "SHUTDOWN_TIMEOUT": env.float("JOBS_SHUTDOWN_TIMEOUT", default=30.0),
    # Prepared enqueue statements; off for PgBouncer < 1.21 in transaction mode.
    "PREPARED_STATEMENTS": env.bool("JOBS_PREPARED_STATEMENTS", default=True),
    # Retention of finished jobs before pruning (seconds).
    "RETENTION_SUCCEEDED": env.float("JOBS_RETENTION_SUCCEEDED", default=7 * 86400),
    "RETENTION_DEAD": env.float("JOBS_RETENTION_DEAD", default=90 * 86400),
    "RETENTION_CANCELLED": env.float("JOBS_RETENTION_CANCELLED", default=30 * 86400),
    # --- The scheduler (manage.py runscheduler) ---
    # Zone of schedules that name none (IANA name).
    "SCHEDULER_TIME_ZONE": env.str("JOBS_SCHEDULER_TIME_ZONE", default=TIME_ZONE),
    # Longest sleep between looks at the schedules (seconds); saving a schedule also wakes it.
    "SCHEDULER_MAX_SLEEP": env.float("JOBS_SCHEDULER_MAX_SLEEP", default=60.0),
    # A slot fired at most this late (seconds) is on time; older ones are missed and follow
    # the schedule's catch-up policy.
    "SCHEDULER_MISFIRE_GRACE": env.float("JOBS_SCHEDULER_MISFIRE_GRACE", default=60.0),
    # Most missed slots one schedule fires in one catch-up.
    "SCHEDULER_CATCHUP_LIMIT": env.int("JOBS_SCHEDULER_CATCHUP_LIMIT", default=100),
    # Fire records (one per schedule and slot) are kept this long (seconds).
    "RETENTION_FIRE_RECORDS": env.float("JOBS_RETENTION_FIRE_RECORDS", default=30 * 86400),
    # Schedules declared here, synced into the database when a scheduler starts:
    # {"name": {"task": "app.tasks.fn", "cron": "0 3 * * *", ...}}; None drops a built-in.
    "SCHEDULES": {},
}

# --- PUSH: push notifications (notifications/push) ---------------------------------------
PUSH = {
    # Dotted path of the backend: console (prints), locmem (an outbox in memory, for tests),
    # or the real providers (iOS through APNs, Android through FCM).
    "BACKEND": env.str("PUSH_BACKEND", default="notifications.push.providers.console.ConsoleBackend"),
    # APNs: sandbox host by default; production is https://api.push.apple.com.
    "APNS_BASE_URL": env.str("PUSH_APNS_BASE_URL", default="https://api.sandbox.push.apple.com"),
    # Token-based auth: the team's .p8 signing key, its key id and the team id.
    "APNS_KEY_FILE": env.str("PUSH_APNS_KEY_FILE", default=""),
    "APNS_KEY_ID": env.str("PUSH_APNS_KEY_ID", default=""),
    "APNS_TEAM_ID": env.str("PUSH_APNS_TEAM_ID", default=""),
    # The app's bundle id (apns-topic) unless a device registered its own app_id.
    "APNS_TOPIC": env.str("PUSH_APNS_TOPIC", default=""),
    "FCM_BASE_URL": env.str("PUSH_FCM_BASE_URL", default="https://fcm.googleapis.com"),
    # A service-account key (JSON): project id, signing key and token endpoint (token_uri).
    "FCM_CREDENTIALS_FILE": env.str("PUSH_FCM_CREDENTIALS_FILE", default=""),
    # A CA certificate (PEM) trusted in addition to the public roots; whatever
    # SSL_CERT_FILE or REQUESTS_CA_BUNDLE say, only these are trusted.
    "CA_BUNDLE": env.str("PUSH_CA_BUNDLE", default=""),
    "CONNECT_TIMEOUT": env.float("PUSH_CONNECT_TIMEOUT", default=5.0),
    "REQUEST_TIMEOUT": env.float("PUSH_REQUEST_TIMEOUT", default=10.0),
    "MAX_ATTEMPTS": env.int("PUSH_MAX_ATTEMPTS", default=8),
}
# --- end of PUSH ----------------------------------------------------------------------------

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "kv": {"format": "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "kv"},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.tasks": {"level": "WARNING"},
        "jobs": {"level": env.str("JOBS_LOG_LEVEL", default=LOG_LEVEL), "propagate": True},
        # PUSH: httpx logs each request's URL at INFO, and APNs URLs carry device tokens.
        "httpx": {"level": "WARNING"},
    },
}
