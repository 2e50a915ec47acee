"""Conveyor's Django settings, read from the environment.

Every variable has a documented default (docs/configuration.md). With no environment set,
Conveyor runs embedded: SQLite in WAL mode and kombu's filesystem broker, both under ``var/``.
"""

import re
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from project import env, secretfiles, settings_registry
from project.logging import log_stream
from project.redaction import redact_text

BASE_DIR = Path(__file__).resolve().parent.parent
# Every CONVEYOR_* setting, declared once in project/settings_registry.py, becomes a Django
# setting of the same name here; nothing else reads a CONVEYOR_* variable.
_CONVEYOR = settings_registry.load(BASE_DIR)
globals().update(_CONVEYOR)
VAR_DIR = _CONVEYOR["CONVEYOR_VAR_DIR"]
# var/ holds the secret key, the embedded database and repository clones: owner only (0700);
# an older install's looser mode is tightened here and logged once by project.startup.
secretfiles.private_dir(VAR_DIR)


def _secret_key() -> str:
    """Use DJANGO_SECRET_KEY, else a key generated once and kept in var/."""
    configured = env.string("DJANGO_SECRET_KEY")
    if configured:
        return configured
    return secretfiles.kept_secret(VAR_DIR / "secret_key", lambda: secrets.token_urlsafe(50))


SECRET_KEY = _secret_key()
DEBUG = env.boolean("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [
    h.strip()
    for h in env.string("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in env.string("DJANGO_CSRF_TRUSTED_ORIGINS").split(",") if o.strip()
]
for _origin in CSRF_TRUSTED_ORIGINS:
    if not re.match(r"^https?://[^/\s]+$", _origin):
        raise ImproperlyConfigured(
            f"DJANGO_CSRF_TRUSTED_ORIGINS: {_origin!r} is not an origin "
            "(expected a scheme and a host, such as https://conveyor.example.com)"
        )

INSTALLED_APPS = [
    "project.apps.ConsoleAdminConfig",  # the stock admin with the console's site (dashboard)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "django_celery_results",
    "axes",
    "ninja",  # Swagger UI at /api/v1/docs from its static files, never a CDN
    "jobs",
    "project.access",  # API tokens, idempotency keys, the permission table
    "webhooks",
    "deployments",
    *settings_registry.your_apps(_CONVEYOR["CONVEYOR_APPS"]),  # your own, if any
]

MIDDLEWARE = [
    "project.middleware.ApiErrorShapeMiddleware",
    "project.middleware.RefuseNulBytesMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Last, as axes asks: turns a locked-out attempt into project.throttling's 429.
    "axes.middleware.AxesMiddleware",
]

# The console and /api/v1/docs load everything from this server and run no inline script or
# style (templates use classes and static files), so the policy allows nothing else.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],  # the admin's and Swagger UI's icons are data: URIs
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out client at once
    "django.contrib.auth.backends.ModelBackend",
    "project.access.auth.ApiTokenBackend",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "project" / "templates"],
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


def _database() -> dict:
    """Parse DATABASE_URL, else an SQLite file in var/ tuned for several processes."""
    url = env.string("DATABASE_URL")
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": secretfiles.private_sqlite(VAR_DIR / "conveyor.sqlite3"),
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN, so two writers queue on the busy
                # timeout instead of failing with "database is locked" mid-transaction.
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    expected = "expected postgres://user:password@host:5432/name or sqlite:////absolute/path"
    shown = re.sub(r"://([^:/@]*):[^@]*@", r"://\1:***@", url)  # never print a password
    try:
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except Exception:  # dj-database-url raises several types for a bad URL
        raise ImproperlyConfigured(
            f"DATABASE_URL: {shown!r} is not a usable database URL ({expected})"
        ) from None
    if not config.get("ENGINE"):
        raise ImproperlyConfigured(f"DATABASE_URL: {shown!r} names no database engine ({expected})")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        secretfiles.private_sqlite(config.get("NAME"))  # every secret is in it
    if config["ENGINE"] == "django.db.backends.postgresql":
        config.setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
# Where Django formats a time itself (a stock form's read-only field), it does so as project.times.
FORMAT_MODULE_PATH = ["project.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "project" / "static"]
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

# --- Celery (read by project/celery.py under the CELERY_ namespace) -----------------------
_DEFAULT_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env.string("CELERY_BROKER_URL", "filesystem://")


def _check_broker_url(url: str) -> None:
    """Refuse a broker URL no kombu transport serves (a worker would die on it later)."""
    from kombu.transport import resolve_transport

    scheme, separator, _ = url.partition("://")
    if separator and scheme:
        try:
            resolve_transport(scheme.partition("+")[0])
            return
        except (KeyError, ImportError):
            pass
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL: {redact_text(url)!r} is not a broker URL (expected "
        "redis://host:6379/0, amqp://user:password@host:5672// or filesystem://)"
    )


for _url in CELERY_BROKER_URL.split(";"):  # several URLs: failover
    _check_broker_url(_url.strip())
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (_DEFAULT_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_DEFAULT_BROKER_DIR / "queue"),
        "data_folder_out": str(_DEFAULT_BROKER_DIR / "queue"),
        "processed_folder": str(_DEFAULT_BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(_DEFAULT_BROKER_DIR / "control"),
        "polling_interval": 0.2,
    }
    # The same transport, answering a worker's SIGTERM within one polling interval.
    CELERY_BROKER_TRANSPORT = "project.broker:FilesystemTransport"
else:
    if CELERY_BROKER_URL.startswith("redis://") and ";" not in CELERY_BROKER_URL:
        # kombu's Redis transport with less bookkeeping per message (project/redis_broker.py):
        # one client per channel, and a job's doorbell not recorded as unacknowledged.
        CELERY_BROKER_TRANSPORT = "project.redis_broker:RedisTransport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # A message with a countdown is held unacknowledged by a worker until it is due;
        # Redis redelivers anything recorded unacknowledged after visibility_timeout (kombu's
        # own transport does so for a job's doorbell too), so it must stay well above the
        # longest retry delay (CONVEYOR_RETRY_BACKOFF_MAX; checked at start-up).
        "visibility_timeout": 4 * 3600,
        "socket_connect_timeout": 3,
        "socket_timeout": 10,
        "max_retries": 2,
    }
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_RESULT_EXPIRES = _CONVEYOR["CONVEYOR_RESULT_RETENTION"]
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery closes Django's database connections around every task unless this is set; a
# worker then pays a new connection per job. Reuse them (closing every 1,000 tasks).
CELERY_DB_REUSE_MAX = 1000
CELERY_TASK_TRACK_STARTED = False
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_REDIRECT_STDOUTS = False
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_WORKER_SEND_TASK_EVENTS = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

# --- Django's built-in tasks framework runs on Conveyor's job engine ----------------------
# Django's built-in tasks run as Conveyor jobs (docs/jobs.md). A queue named here is consumed
# by the ``worker`` process without further flags.
TASKS = {
    "default": {
        "BACKEND": "jobs.backends.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"max_attempts": 1},
    }
}

# --- Security (docs/operations.md "Security"; the settings in project/settings_registry.py) --
AXES_HANDLER = "project.throttling.SerializedDatabaseHandler"
AXES_FAILURE_LIMIT = _CONVEYOR["CONVEYOR_AUTH_FAILURE_LIMIT"]
AXES_COOLOFF_TIME = _CONVEYOR["CONVEYOR_AUTH_LOCKOUT"]
AXES_LOCKOUT_PARAMETERS = "project.throttling.lockout_parameters"
AXES_CLIENT_IP_CALLABLE = "project.throttling.client_address"
AXES_LOCKOUT_CALLABLE = "project.throttling.lockout_response"
# An attempt refused while locked out is not recorded, so it never extends the lock.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False

if _CONVEYOR["CONVEYOR_HTTPS"]:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # probes speak plain HTTP to the process
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(_CONVEYOR["CONVEYOR_HSTS_MAX_AGE"].total_seconds())
    SECURE_HSTS_INCLUDE_SUBDOMAINS = False  # other hosts of the domain may not speak HTTPS

# --- Logging: one JSON object per line on stdout -----------------------------------------
LOG_LEVEL = _CONVEYOR["CONVEYOR_LOG_LEVEL"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "project.logging.JsonFormatter"}},
    "filters": {"quiet_ticks": {"()": "project.logging.QuietTicks"}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": log_stream(),  # stderr for a command whose stdout is its answer
            "formatter": "json",
        }
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
        "kombu.connection": {"level": "ERROR"},
        "celery.beat": {"filters": ["quiet_ticks"]},  # the schedule tick's, every second
        # axes announces itself at INFO in every process (and command); failures are WARNING.
        "axes": {"level": "WARNING"},
    },
}

# --- Periodic maintenance, installed into django-celery-beat by `setup_periodic_tasks` ----
# (name, Celery task, interval). Beat's DatabaseScheduler reads them from the database.
CONVEYOR_PERIODIC_TASKS = [
    (
        "conveyor: reap expired job leases",
        "maintenance.reap_jobs",
        _CONVEYOR["CONVEYOR_REAPER_INTERVAL"],
    ),
    (
        "conveyor: sweep unclaimed jobs",
        "maintenance.sweep_jobs",
        _CONVEYOR["CONVEYOR_SWEEPER_INTERVAL"],
    ),
    (
        "conveyor: fold job counts and refresh job statistics",
        "maintenance.account_jobs",
        _CONVEYOR["CONVEYOR_ACCOUNTING_INTERVAL"],
    ),
    (
        "conveyor: purge finished jobs",
        "maintenance.purge_jobs",
        _CONVEYOR["CONVEYOR_PURGE_INTERVAL"],
    ),
    (
        "conveyor: fetch git workspaces",
        "maintenance.fetch_workspaces",
        _CONVEYOR["CONVEYOR_WORKSPACE_FETCH_INTERVAL"],
    ),
    (
        "conveyor: prune idle worktrees",
        "maintenance.prune_worktrees",
        _CONVEYOR["CONVEYOR_WORKTREE_PRUNE_INTERVAL"],
    ),
    (
        "conveyor: purge old deployment logs",
        "maintenance.purge_deployment_logs",
        _CONVEYOR["CONVEYOR_PURGE_INTERVAL"],
    ),
    (
        "conveyor: expire deployment approvals",
        "maintenance.expire_approvals",
        _CONVEYOR["CONVEYOR_APPROVAL_EXPIRY_INTERVAL"],
    ),
    (
        "conveyor: decide deployments no deployer can take",
        "maintenance.check_unrouted",
        _CONVEYOR["CONVEYOR_UNROUTED_CHECK_INTERVAL"],
    ),
    (
        "conveyor: purge old webhook deliveries",
        "maintenance.purge_webhooks",
        _CONVEYOR["CONVEYOR_PURGE_INTERVAL"],
    ),
    (
        "conveyor: fire due schedules",
        "maintenance.fire_schedules",
        _CONVEYOR["CONVEYOR_SCHEDULE_TICK"],
    ),
    (
        "conveyor: purge old idempotency keys",
        "maintenance.purge_idempotency_keys",
        _CONVEYOR["CONVEYOR_PURGE_INTERVAL"],
    ),
]
