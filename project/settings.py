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

from project import env, secretfiles

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env.string("CONVEYOR_VAR_DIR", str(BASE_DIR / "var"))).resolve()
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
    "webhooks",
    "deployments",
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
    "jobs.auth.ApiTokenBackend",
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
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # A retry countdown is held unacknowledged by a worker until it is due; Redis
        # redelivers anything unacknowledged after visibility_timeout, so it must stay well
        # above the longest retry delay (CONVEYOR_RETRY_BACKOFF_MAX; checked at start-up).
        "visibility_timeout": 4 * 3600,
        "socket_connect_timeout": 3,
        "socket_timeout": 10,
        "max_retries": 2,
    }
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_RESULT_EXPIRES = env.duration("CONVEYOR_RESULT_RETENTION", "7d")
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

# The longest retry delay any job waits (exponential backoff is capped here), in seconds.
CONVEYOR_RETRY_BACKOFF_MAX = 900

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

# --- Conveyor ---------------------------------------------------------------------------
CONVEYOR_JOB_LEASE_TIMEOUT = env.duration("CONVEYOR_JOB_LEASE_TIMEOUT", "5m")
CONVEYOR_JOB_MAX_ATTEMPTS = env.integer("CONVEYOR_JOB_MAX_ATTEMPTS", 5, minimum=1)
# Job ids per broker message when many jobs of one task are published at once (enqueue_many,
# webhook fan-out, the sweeper); 1 turns batching off.
CONVEYOR_BATCH_SIZE = env.integer("CONVEYOR_BATCH_SIZE", 25, minimum=1, maximum=500)
# The most jobs of a queue running at once across every worker and host: ``name=N,name=N``
# (jobs.queues); a queue not named has no limit but its workers' own concurrency.
CONVEYOR_QUEUE_CONCURRENCY = env.counts_by_name("CONVEYOR_QUEUE_CONCURRENCY")
# On SIGTERM, how long running jobs may finish before the worker hands them back (jobs.shutdown).
CONVEYOR_SHUTDOWN_GRACE = env.duration("CONVEYOR_SHUTDOWN_GRACE", "30s")
# Log one ``job.succeeded`` line per successful job (off: the success path stays quiet).
CONVEYOR_JOB_LOG_SUCCESS = env.boolean("CONVEYOR_JOB_LOG_SUCCESS", False)
# How often each worker writes its WorkerHeartbeat row (jobs.heartbeat); 3 missed = gone.
CONVEYOR_WORKER_HEARTBEAT = env.duration("CONVEYOR_WORKER_HEARTBEAT", "5s")
# /metrics without a token: comma-separated addresses or networks (e.g. 10.0.0.0/8).
CONVEYOR_METRICS_ALLOW = env.string("CONVEYOR_METRICS_ALLOW", "")
CONVEYOR_REAPER_INTERVAL = env.duration("CONVEYOR_REAPER_INTERVAL", "1m")
CONVEYOR_SWEEPER_INTERVAL = env.duration("CONVEYOR_SWEEPER_INTERVAL", "1m")
# How often the account_jobs runner folds job count deltas and refreshes the minute rollup.
CONVEYOR_ACCOUNTING_INTERVAL = env.duration("CONVEYOR_ACCOUNTING_INTERVAL", "5s")
CONVEYOR_SWEEPER_GRACE = env.duration("CONVEYOR_SWEEPER_GRACE", "1m")
CONVEYOR_PURGE_INTERVAL = env.duration("CONVEYOR_PURGE_INTERVAL", "1h")
CONVEYOR_PURGE_COMPLETED_RETENTION = env.duration("CONVEYOR_PURGE_COMPLETED_RETENTION", "7d")
CONVEYOR_PURGE_DEAD_RETENTION = env.duration("CONVEYOR_PURGE_DEAD_RETENTION", "30d")
# Maintenance run records (jobs.MaintenanceRun) older than this go; each runner's latest stays.
CONVEYOR_MAINTENANCE_RETENTION = env.duration("CONVEYOR_MAINTENANCE_RETENTION", "7d")
CONVEYOR_WORKSPACE_FETCH_INTERVAL = env.duration("CONVEYOR_WORKSPACE_FETCH_INTERVAL", "5m")
# How often beat ends deployments whose approval timed out (CONVEYOR_APPROVAL_TIMEOUT).
CONVEYOR_APPROVAL_EXPIRY_INTERVAL = env.duration("CONVEYOR_APPROVAL_EXPIRY_INTERVAL", "1m")
CONVEYOR_WORKTREE_PRUNE_INTERVAL = env.duration("CONVEYOR_WORKTREE_PRUNE_INTERVAL", "24h")
CONVEYOR_WORKTREE_IDLE_THRESHOLD = env.duration("CONVEYOR_WORKTREE_IDLE_THRESHOLD", "30d")
CONVEYOR_WORKTREE_WARNING_LEAD = env.duration("CONVEYOR_WORKTREE_WARNING_LEAD", "72h")
CONVEYOR_LOG_RETENTION = env.duration("CONVEYOR_LOG_RETENTION", "90d")
CONVEYOR_WEBHOOKS_ENABLED = env.boolean("CONVEYOR_WEBHOOKS_ENABLED", True)
CONVEYOR_WEBHOOK_TIMEOUT = env.duration("CONVEYOR_WEBHOOK_TIMEOUT", "10s")
CONVEYOR_WEBHOOK_MAX_ATTEMPTS = env.integer("CONVEYOR_WEBHOOK_MAX_ATTEMPTS", 6, minimum=1)
CONVEYOR_WEBHOOK_DISABLE_AFTER = env.integer("CONVEYOR_WEBHOOK_DISABLE_AFTER", 10, minimum=1)
CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = env.boolean("CONVEYOR_WEBHOOKS_ALLOW_PRIVATE", False)
# Comma-separated CIDRs a webhook may reach even when they are private (e.g. 10.1.0.0/16).
CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS = env.string("CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS", "")
# Delivery retries: Celery backoff factor and cap (full jitter), and the cap on Retry-After.
CONVEYOR_WEBHOOK_BACKOFF = env.duration("CONVEYOR_WEBHOOK_BACKOFF", "30s")
CONVEYOR_WEBHOOK_BACKOFF_MAX = env.duration("CONVEYOR_WEBHOOK_BACKOFF_MAX", "15m")
CONVEYOR_WEBHOOK_RETRY_AFTER_MAX = env.duration("CONVEYOR_WEBHOOK_RETRY_AFTER_MAX", "15m")
CONVEYOR_WEBHOOK_RETENTION = env.duration("CONVEYOR_WEBHOOK_RETENTION", "30d")
# Threads of the ``webhooks`` worker (make run, docker-compose): deliveries wait on receivers.
CONVEYOR_WEBHOOK_CONCURRENCY = env.integer("CONVEYOR_WEBHOOK_CONCURRENCY", 32, minimum=1)
# Per endpoint, across every worker: the most deliveries in flight (so one slow receiver
# cannot take every thread; default half the pool) and the most started per window (N/s,
# N/m or N/h; empty: none).
CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY = env.integer(
    "CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY", max(1, CONVEYOR_WEBHOOK_CONCURRENCY // 2), minimum=1
)
CONVEYOR_WEBHOOK_ENDPOINT_RATE = env.string("CONVEYOR_WEBHOOK_ENDPOINT_RATE", "")
CONVEYOR_WORKSPACES_DIR = Path(env.string("CONVEYOR_WORKSPACES_DIR", str(VAR_DIR / "workspaces")))

# --- Security (docs/operations.md "Security") -----------------------------------------------
# true behind a TLS-terminating proxy that sets X-Forwarded-Proto: secure cookies, HSTS.
CONVEYOR_HTTPS = env.boolean("CONVEYOR_HTTPS", False)
CONVEYOR_HSTS_MAX_AGE = env.duration("CONVEYOR_HSTS_MAX_AGE", "365d")
# Failed admin logins (per username and address) and failed API tokens (per address; a valid
# token is never refused) lock out for CONVEYOR_AUTH_LOCKOUT after the last one
# (project/throttling.py).
CONVEYOR_AUTH_FAILURE_LIMIT = env.integer("CONVEYOR_AUTH_FAILURE_LIMIT", 10, minimum=1)
CONVEYOR_AUTH_LOCKOUT = env.duration("CONVEYOR_AUTH_LOCKOUT", "15m")
# Trusted reverse proxies in front of the web processes (the client is in X-Forwarded-For).
CONVEYOR_PROXY_COUNT = env.integer("CONVEYOR_PROXY_COUNT", 0)

AXES_HANDLER = "project.throttling.SerializedDatabaseHandler"
AXES_FAILURE_LIMIT = CONVEYOR_AUTH_FAILURE_LIMIT
AXES_COOLOFF_TIME = CONVEYOR_AUTH_LOCKOUT
AXES_LOCKOUT_PARAMETERS = "project.throttling.lockout_parameters"
AXES_CLIENT_IP_CALLABLE = "project.throttling.client_address"
AXES_LOCKOUT_CALLABLE = "project.throttling.lockout_response"
# An attempt refused while locked out is not recorded, so it never extends the lock.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False

if CONVEYOR_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # probes speak plain HTTP to the process
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(CONVEYOR_HSTS_MAX_AGE.total_seconds())
    SECURE_HSTS_INCLUDE_SUBDOMAINS = False  # other hosts of the domain may not speak HTTPS

# --- Logging: one JSON object per line on stdout -----------------------------------------
LOG_LEVEL = env.choice(
    "CONVEYOR_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "project.logging.JsonFormatter"}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "json",
        }
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
        "kombu.connection": {"level": "ERROR"},
        # axes announces itself at INFO in every process (and command); failures are WARNING.
        "axes": {"level": "WARNING"},
    },
}

# --- Periodic maintenance, installed into django-celery-beat by `setup_periodic_tasks` ----
# (name, Celery task, interval). Beat's DatabaseScheduler reads them from the database.
CONVEYOR_PERIODIC_TASKS = [
    ("conveyor: reap expired job leases", "maintenance.reap_jobs", CONVEYOR_REAPER_INTERVAL),
    ("conveyor: sweep unclaimed jobs", "maintenance.sweep_jobs", CONVEYOR_SWEEPER_INTERVAL),
    (
        "conveyor: fold job counts and refresh job statistics",
        "maintenance.account_jobs",
        CONVEYOR_ACCOUNTING_INTERVAL,
    ),
    ("conveyor: purge finished jobs", "maintenance.purge_jobs", CONVEYOR_PURGE_INTERVAL),
    (
        "conveyor: fetch git workspaces",
        "maintenance.fetch_workspaces",
        CONVEYOR_WORKSPACE_FETCH_INTERVAL,
    ),
    (
        "conveyor: prune idle worktrees",
        "maintenance.prune_worktrees",
        CONVEYOR_WORKTREE_PRUNE_INTERVAL,
    ),
    (
        "conveyor: purge old deployment logs",
        "maintenance.purge_deployment_logs",
        CONVEYOR_PURGE_INTERVAL,
    ),
    (
        "conveyor: expire deployment approvals",
        "maintenance.expire_approvals",
        CONVEYOR_APPROVAL_EXPIRY_INTERVAL,
    ),
    (
        "conveyor: purge old webhook deliveries",
        "maintenance.purge_webhooks",
        CONVEYOR_PURGE_INTERVAL,
    ),
]
