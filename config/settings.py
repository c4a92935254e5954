"""Settings. Every knob is an environment variable with a safe default (see .env.example)."""

import logging
import os
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config.security import secret_key_problem

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
# The built-in key is only for DEBUG=true; with DEBUG off the site refuses it (see the
# "Accounts, email and the public site's security" section below).
DEV_SECRET_KEY = "dev-only-insecure-key-change-me"
# Without SECRET_KEY in the environment or .env, the key scripts/run made for this checkout
# (SECRET_KEY_FILE, default .secret-key), so that ./manage.py commands sign what the running
# site verifies.
_checkout_key = Path(env.str("SECRET_KEY_FILE", default=str(BASE_DIR / ".secret-key")))
SECRET_KEY = env.str(
    "SECRET_KEY", default=_checkout_key.read_text().strip() if _checkout_key.exists() else DEV_SECRET_KEY
)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    # Django's admin, discovered by the URLconf and the checks rather than at start-up.
    "config.apps.AdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "axes",
    "jobs",
    "accounts",
    "notifications",
    "demos",
    "reports",
]
# Benchmarks, the chaos drill and the fleet simulator (lab/): their commands exist only where
# JOBS_LAB=true (scripts/bench, scripts/chaos, scripts/fleet, the tests), never by default.
JOBS_LAB = env.bool("JOBS_LAB", default=False)
if JOBS_LAB:
    INSTALLED_APPS.append("lab")

MIDDLEWARE = [
    # First: the request's trace id (traceparent / X-Request-ID) and request metrics.
    "jobs.middleware.ObserveMiddleware",
    # Next: every error under /api/ answers JSON, whichever layer below made it.
    "web.jsonapi.ApiErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The console's read views read the job tables from DATABASE_REPLICA_URL when it is set.
    "jobs.console.replica.ReplicaReadsMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # API requests with "Authorization: Bearer <token>" act as the token's user.
    "accounts.authentication.BearerTokenMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout page.
    "axes.middleware.AxesMiddleware",
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
# DATABASE_URL goes through a pooler in transaction mode (PgBouncer): consecutive transactions
# may land on different server sessions, so nothing may rely on session state. Prepared
# statements are off (PgBouncer < 1.21 cannot keep them; Debian 12 ships 1.18), and so is
# LISTEN unless JOBS_LISTEN_URL names a direct connection for it: workers then poll only.
JOBS_POOLED = env.bool("JOBS_POOLED", default=False)
JOBS_LISTEN_URL = env.str("JOBS_LISTEN_URL", default="")
if JOBS_POOLED:
    # A server-side cursor outlives the transaction that opened it (WITH HOLD) only in its session.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# A read replica (streaming, e.g. made with pg_basebackup -R) for the console's read views:
# the dashboard, the job list and the status API (jobs/routers.py). Writes and claims never
# go there.
if _replica_url := env.str("DATABASE_REPLICA_URL", default=""):
    DATABASES["replica"] = env.db_url_config(_replica_url)
    DATABASES["replica"].setdefault("CONN_MAX_AGE", DATABASES["default"]["CONN_MAX_AGE"])
    # Tests never make a test database of their own on the replica: it follows the primary.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
DATABASE_ROUTERS = ["jobs.routers.ReplicaRouter"]
# The views (URL names) whose GET requests read the job tables from the replica.
JOBS_REPLICA_VIEWS = env.list(
    "JOBS_REPLICA_VIEWS",
    default=[
        "jobs:job-status",
        "admin:jobs_job_changelist",
        "admin:jobs_job_change",
        "admin:jobs_job_dashboard",
    ],
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True
# One way of writing dates across the site and the console (config/formats/en/formats.py).
FORMAT_MODULE_PATH = ["config.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]

# Uploaded imports and jobs' result files (reports, rejected rows) go through Django's
# storage API: files under MEDIA_ROOT by default (never served directly: downloads go through
# the signed, owner-checked link of jobs/files.py), or an S3-compatible bucket with
# STORAGE_BACKEND=s3 and the AWS_* variables django-storages reads (.env.example).
MEDIA_ROOT = Path(env.str("MEDIA_ROOT", default=str(BASE_DIR / "media")))
_storage_backend = env.str("STORAGE_BACKEND", default="filesystem")
if _storage_backend not in ("filesystem", "s3"):
    raise ImproperlyConfigured(f"STORAGE_BACKEND is 'filesystem' or 's3', not {_storage_backend!r}")
STORAGES = {
    "default": (
        {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": env.str("AWS_STORAGE_BUCKET_NAME", default=""),
                "endpoint_url": env.str("AWS_S3_ENDPOINT_URL", default="") or None,
                "region_name": env.str("AWS_S3_REGION_NAME", default="") or None,
                "default_acl": "private",
                "file_overwrite": False,
            },
        }
        if _storage_backend == "s3"
        else {"BACKEND": "django.core.files.storage.FileSystemStorage"}
    ),
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

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
    # LISTEN/NOTIFY wake-ups: on, except behind a pooler (JOBS_POOLED) with no direct
    # JOBS_LISTEN_URL to listen on.
    "LISTEN": env.bool("JOBS_LISTEN", default=not JOBS_POOLED or bool(JOBS_LISTEN_URL)),
    "LISTEN_URL": JOBS_LISTEN_URL,
    # The host name workers register with (default: the machine's).
    "HOSTNAME": env.str("JOBS_HOSTNAME", default=""),
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
    "MAX_BATCH": env.int("JOBS_MAX_BATCH", default=1000),
    # Per executor: async handlers running at once, and handler threads for blocking tasks
    # that wait on I/O (0: they run one at a time in the executor's main thread).
    "ASYNC_CONCURRENCY": env.int("JOBS_ASYNC_CONCURRENCY", default=50),
    "THREADS": env.int("JOBS_THREADS", default=0),
    # A job whose task does not import (a deploy rolling out) is retried, using no attempt,
    # for this long before it goes dead (seconds).
    "UNKNOWN_TASK_GRACE": env.float("JOBS_UNKNOWN_TASK_GRACE", default=600.0),
    "REAPER_INTERVAL": env.float("JOBS_REAPER_INTERVAL", default=30.0),
    "SHUTDOWN_TIMEOUT": env.float("JOBS_SHUTDOWN_TIMEOUT", default=30.0),
    # Prepared statements (enqueue, claim, outcomes); off behind PgBouncer < 1.21 in
    # transaction mode (JOBS_POOLED turns them off).
    "PREPARED_STATEMENTS": env.bool("JOBS_PREPARED_STATEMENTS", default=not JOBS_POOLED),
    "POOLED": JOBS_POOLED,
    # Each runworker's Prometheus /metrics (0: off); the address it listens on.
    "METRICS_PORT": env.int("JOBS_METRICS_PORT", default=0),
    "METRICS_ADDR": env.str("JOBS_METRICS_ADDR", default="127.0.0.1"),
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
    # Named rate/concurrency limits, shared by every task that says @task(limit="name"),
    # across all workers (jobs/limits.py). The console can change them at run time.
    "LIMITS": {
        # The email provider's request rate (Resend allows 100 requests/s).
        "email": {
            "rate": env.str("JOBS_LIMIT_EMAIL_RATE", default="100/s"),
            "burst": env.int("JOBS_LIMIT_EMAIL_BURST", default=10),
        },
        # Apple's and Google's push services: generous, to stay clear of their throttling.
        "apns": {
            "rate": env.str("JOBS_LIMIT_APNS_RATE", default="1000/s"),
            "burst": env.int("JOBS_LIMIT_APNS_BURST", default=100),
        },
        "fcm": {
            "rate": env.str("JOBS_LIMIT_FCM_RATE", default="1000/s"),
            "burst": env.int("JOBS_LIMIT_FCM_BURST", default=100),
        },
    },
    # Schedules declared here, synced into the database when a scheduler starts:
    # {"name": {"task": "app.tasks.fn", "cron": "0 3 * * *", ...}}; None drops a built-in.
    "SCHEDULES": {},
    # A bearer token that may send workflow signals (POST /api/workflows/<id>/signals/<name>)
    # besides staff sessions; empty: staff only.
    "WORKFLOW_SIGNAL_TOKEN": env.str("JOBS_WORKFLOW_SIGNAL_TOKEN", default=""),
    # Result files (reports, rejected rows): the STORAGES alias, and how long a download
    # link from the status API stays valid (seconds).
    "RESULT_STORAGE": env.str("JOBS_RESULT_STORAGE", default="default"),
    "DOWNLOAD_URL_MAX_AGE": env.float("JOBS_DOWNLOAD_URL_MAX_AGE", default=3600.0),
}

# --- Accounts, email and the public site's security -------------------------------------
# A public site must not sign sessions and links with a known key: with DEBUG off, refuse to
# start at all (web, worker and every manage.py command) rather than serve with it.
if not DEBUG and (_problem := secret_key_problem(SECRET_KEY, development_key=DEV_SECRET_KEY)):
    raise ImproperlyConfigured(
        f"{_problem}. With DEBUG=false, set SECRET_KEY to 50+ random characters (for example "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`), or set DEBUG=true "
        "for local development."
    )

# Jobs build the links in emails without a request, so they need the site's own address.
SITE_URL = env.str("SITE_URL", default="http://127.0.0.1:8000").rstrip("/")
SITE_NAME = env.str("SITE_NAME", default="jobqueue")

AUTHENTICATION_BACKENDS = [
    # First, so a locked-out username or address is refused before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    # Username or email address; accounts whose address is not verified cannot log in.
    "accounts.backends.VerifiedAccountBackend",
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "home"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Password-reset links stay valid this long (seconds); they also die once used.
PASSWORD_RESET_TIMEOUT = env.int("PASSWORD_RESET_TIMEOUT", default=3600)

# Verification links stay valid this long (seconds); never-verified signups older than this
# (since their last link) are deleted by the accounts.delete_unverified_signups schedule.
ACCOUNTS_VERIFICATION_MAX_AGE = env.int("ACCOUNTS_VERIFICATION_MAX_AGE", default=3 * 86400)
# Emails anyone may ask for: "send me a new link" and password-reset emails at most once per
# address per ACCOUNTS_RESEND_COOLDOWN_ADDRESS seconds; signups, new links and password
# resets each at most once per client IP per ACCOUNTS_RESEND_COOLDOWN_IP seconds (answered
# 429 with Retry-After); shared by every process through the database.
ACCOUNTS_RESEND_COOLDOWN_ADDRESS = env.int("ACCOUNTS_RESEND_COOLDOWN_ADDRESS", default=120)
ACCOUNTS_RESEND_COOLDOWN_IP = env.int("ACCOUNTS_RESEND_COOLDOWN_IP", default=20)
# Reverse proxies in front of the site that append the client's address to X-Forwarded-For.
# 0: the client is REMOTE_ADDR (no proxy, or one that overwrites REMOTE_ADDR itself).
CLIENT_IP_PROXY_COUNT = env.int("CLIENT_IP_PROXY_COUNT", default=0)

# Login throttling (django-axes) for the site and the admin: after AXES_FAILURE_LIMIT wrong
# passwords for one account from one IP, that account is locked out from that IP for the
# cool-off time; after ACCOUNTS_LOGIN_IP_FAILURE_LIMIT failed logins from one IP over any
# usernames, the IP is. Not per account alone (anyone could lock the admin out from anywhere)
# nor per IP alone at the account's limit (one shared office NAT would lock everyone out).
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
ACCOUNTS_LOGIN_IP_FAILURE_LIMIT = env.int("ACCOUNTS_LOGIN_IP_FAILURE_LIMIT", default=30)
AXES_COOLOFF_TIME = timedelta(seconds=env.int("AXES_COOLOFF_SECONDS", default=900))
# Counted by accounts.lockout.LoginLockoutHandler, which applies the two limits above.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_HANDLER = "accounts.lockout.LoginLockoutHandler"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "web.clientip.client_ip"
# A username and its email address are the same account for the lockout.
AXES_USERNAME_CALLABLE = "accounts.backends.lockout_username"

# Email goes through Django's email framework (its default mailer). EMAIL_URL picks SMTP
# (smtp://, smtp+tls://, smtp+ssl://, user and password in the URL) or the console;
# EMAIL_BACKEND, when set, wins, e.g. an HTTP provider through django-anymail
# ("anymail.backends.postmark.EmailBackend"), configured by ANYMAIL_* variables
# (ANYMAIL_POSTMARK_SERVER_TOKEN=..., see .env.example).
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
_email = env.email_url("EMAIL_URL", default="consolemail://")
# consolemail:// (development) is the outbox: each message is kept under EMAIL_OUTBOX_DIR for
# the staff page /admin/outbox/ and its text part printed decoded, so its links work.
_console = _email["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
_mailer_backend = env.str(
    "EMAIL_BACKEND",
    default="notifications.email.outbox.OutboxBackend" if _console else _email["EMAIL_BACKEND"],
)
EMAIL_OUTBOX_DIR = env.str("EMAIL_OUTBOX_DIR", default=str(BASE_DIR / ".data" / "outbox"))
# Every network call to a mail server or provider gives up after this many seconds.
_email_timeout = env.float("EMAIL_TIMEOUT", default=10.0)
MAILERS = {
    "default": {
        "BACKEND": _mailer_backend,
        "OPTIONS": {
            "host": _email["EMAIL_HOST"] or "localhost",
            "port": _email["EMAIL_PORT"],
            "username": _email["EMAIL_HOST_USER"] or "",
            "password": _email["EMAIL_HOST_PASSWORD"] or "",
            "use_tls": _email.get("EMAIL_USE_TLS", False),
            "use_ssl": _email.get("EMAIL_USE_SSL", False),
            "timeout": _email_timeout,
        }
        if _mailer_backend == SMTP_BACKEND
        else {},
    },
}
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="jobqueue <no-reply@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
ANYMAIL = {
    name.removeprefix("ANYMAIL_"): value
    for name, value in os.environ.items()
    if name.startswith("ANYMAIL_") and name != "ANYMAIL_REQUESTS_TIMEOUT"
}
ANYMAIL["REQUESTS_TIMEOUT"] = _email_timeout
# A delivery claimed by one attempt is left alone by others this long (seconds): longer than
# any attempt may run (the send task's time limit), so only a crashed sender's claim lapses.
NOTIFICATIONS_EMAIL_CLAIM_SECONDS = env.int("NOTIFICATIONS_EMAIL_CLAIM_SECONDS", default=120)
# POST /api/jobs/email: a message_key used again within this many seconds gets 409.
NOTIFICATIONS_EMAIL_API_DEDUPE_WINDOW = env.int("NOTIFICATIONS_EMAIL_API_DEDUPE_WINDOW", default=600)

# HTTPS and cookies. Off by default for local http://; the production values are in
# .env.example, and `manage.py check --deploy` is clean with them (tests/integration checks).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
# "HTTP_X_FORWARDED_PROTO,https" behind a proxy that sets that header (and strips a client's).
_proxy_ssl_header = env.list("SECURE_PROXY_SSL_HEADER", default=[])
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise ImproperlyConfigured(
        "SECURE_PROXY_SSL_HEADER is a header and a value, e.g. HTTP_X_FORWARDED_PROTO,https"
    )
SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header[0], _proxy_ssl_header[1]) if _proxy_ssl_header else None
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- Observability (jobs/metrics.py, jobs/middleware.py, jobs/otel.py) ---------------------
# /metrics needs "Authorization: Bearer <this>"; empty: the endpoint answers 404.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

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
# text: "ts=... level=... key=value" lines; json: one JSON object per line (jobs/logs.py).
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "kv": {
            "()": "jobs.logs.KeyValueFormatter",
            "format": "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        },
        "json": {
            "()": "jobs.logs.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "ts", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_FORMAT == "json" else "kv"},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's own "django" logger prints to stderr in DEBUG besides propagating here:
        # every request warning ("Not Found: ...") came out twice. Its records go to root alone.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.tasks": {"level": "WARNING"},
        "jobs": {"level": env.str("JOBS_LOG_LEVEL", default=LOG_LEVEL), "propagate": True},
        # One line per finished job: successes at INFO, retries at WARNING, dead at ERROR.
        "jobs.job": {"level": env.str("JOBS_JOB_LOG_LEVEL", default="INFO" if DEBUG else "WARNING")},
        # Axes logs each failed login (username and IP, never the password) as a warning.
        "axes": {"level": env.str("AXES_LOG_LEVEL", default="WARNING")},
        # PUSH: httpx logs each request's URL at INFO, and APNs URLs carry device tokens.
        "httpx": {"level": "WARNING"},
    },
}
if LOG_FORMAT == "json":
    # Python's warnings become log records too, so every line on stderr is a JSON object.
    logging.captureWarnings(True)

# --- Reports and imports (reports/) ----------------------------------------------------------
# Largest CSV accepted by POST /api/imports (bytes), and rows per chunk job.
REPORTS_IMPORT_MAX_BYTES = env.int("REPORTS_IMPORT_MAX_BYTES", default=200 * 1024 * 1024)
REPORTS_IMPORT_CHUNK_ROWS = env.int("REPORTS_IMPORT_CHUNK_ROWS", default=5000)
