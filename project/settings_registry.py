"""Every ``CONVEYOR_*`` setting, declared once: its name, type, default and why it exists.

project/settings.py reads them all from the environment through ``load`` (and nothing else
reads a ``CONVEYOR_*`` variable); each app's ``conf`` reads the Django settings they become;
start-up reports a ``CONVEYOR_*`` variable declared nowhere here; and a test holds
docs/configuration.md to this list, name by name and default by default.

A default is written as it would be in the environment (``"5m"``, ``"25"``, ``"true"``); a
default that follows from another setting is a function of the values read before it, with
``shown`` saying in words what it is.
"""

import importlib.util
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from project import env

Default = str | Callable[[dict], str]


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # duration | integer | boolean | string | choice | counts | path | networks
    default: Default
    why: str
    minimum: int = 0
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    shown: str = ""  # the default in words, when it follows from another setting

    def read(self, values: dict) -> object:
        """Read this setting from the environment, else its default (``values``: those before)."""
        default = self.default(values) if callable(self.default) else self.default
        if self.kind == "duration":
            return env.duration(self.name, default)
        if self.kind == "integer":
            return env.integer(self.name, int(default), minimum=self.minimum, maximum=self.maximum)
        if self.kind == "boolean":
            return env.boolean(self.name, env.parse_boolean(default))
        if self.kind == "choice":
            return env.choice(self.name, default, self.choices)
        if self.kind == "counts":
            return env.counts_by_name(self.name)
        if self.kind == "networks":
            return env.networks(self.name, default)
        if self.kind == "path":
            return Path(env.string(self.name, default) or default).resolve()
        return env.string(self.name, default)

    @property
    def documented_default(self) -> str:
        """The default as docs/configuration.md states it."""
        return self.shown or str(self.default)


def _s(name, kind, default, why, **options) -> Setting:
    return Setting(name=name, kind=kind, default=default, why=why, **options)


# In order: a default that follows from another setting comes after it.
SETTINGS: tuple[Setting, ...] = (
    # --- Process ------------------------------------------------------------------------
    _s(
        "CONVEYOR_VAR_DIR",
        "path",
        lambda values: str(values["BASE_DIR"] / "var"),
        "where the embedded database, broker, secret key and workspaces live",
        shown="var/ in the checkout",
    ),
    _s(
        "CONVEYOR_LOG_LEVEL",
        "choice",
        "INFO",
        "the root logger's level (logs are JSON lines on stdout)",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    ),
    _s(
        "CONVEYOR_ADMIN_PASSWORD",
        "string",
        "",
        "the demo admin's password for seed_demo (else generated once and kept in var/)",
        shown="generated once, kept in var/admin-password and printed",
    ),
    _s(
        "CONVEYOR_APPS",
        "string",
        "",
        "your own Django apps (comma-separated), added to INSTALLED_APPS: their tasks.py "
        "modules hold your tasks",
    ),
    # --- Job engine ---------------------------------------------------------------------
    _s("CONVEYOR_JOB_LEASE_TIMEOUT", "duration", "5m", "a claimed job's lease"),
    _s("CONVEYOR_JOB_MAX_ATTEMPTS", "integer", "5", "attempts per job", minimum=1),
    _s(
        "CONVEYOR_WORKFLOW_MAX_NODES",
        "integer",
        "20000",
        "the most jobs one workflow may hold (a larger one is refused at enqueue)",
        minimum=1,
    ),
    _s(
        "CONVEYOR_RETRY_BACKOFF_MAX",
        "duration",
        "15m",
        "the longest retry delay a job waits (the backoff's cap; at most 30m, the publish horizon)",
    ),
    _s(
        "CONVEYOR_BATCH_SIZE",
        "integer",
        "25",
        "job ids per broker message when many jobs of one task are published at once",
        minimum=1,
        maximum=500,
    ),
    _s(
        "CONVEYOR_QUEUE_CONCURRENCY",
        "counts",
        "",
        "name=N,…: the most jobs of a queue running at once across every worker and host",
    ),
    _s(
        "CONVEYOR_SHUTDOWN_GRACE",
        "duration",
        "30s",
        "on SIGTERM, how long running jobs may finish before the worker hands them back",
    ),
    _s("CONVEYOR_JOB_LOG_SUCCESS", "boolean", "false", "one job.succeeded log line per success"),
    _s(
        "CONVEYOR_PREPARED_STATEMENTS",
        "boolean",
        "true",
        "PostgreSQL: the hot claim and end statements prepared once per connection",
    ),
    _s(
        "CONVEYOR_WORKER_HEARTBEAT",
        "duration",
        "5s",
        "how often each worker writes its heartbeat row (3 missed: gone)",
    ),
    _s(
        "CONVEYOR_METRICS_ALLOW",
        "networks",
        "",
        "addresses or networks that may read /metrics without a token",
    ),
    _s("CONVEYOR_REAPER_INTERVAL", "duration", "1m", "how often expired leases are recovered"),
    _s("CONVEYOR_SWEEPER_INTERVAL", "duration", "1m", "how often lost doorbells are re-sent"),
    _s("CONVEYOR_SWEEPER_GRACE", "duration", "1m", "how long a due job may wait unclaimed"),
    _s(
        "CONVEYOR_ACCOUNTING_INTERVAL",
        "duration",
        "5s",
        "how often job count deltas are folded and the minute statistics refreshed",
    ),
    _s("CONVEYOR_PURGE_INTERVAL", "duration", "1h", "how often finished records are purged"),
    _s("CONVEYOR_PURGE_COMPLETED_RETENTION", "duration", "7d", "succeeded/cancelled jobs kept"),
    _s("CONVEYOR_PURGE_DEAD_RETENTION", "duration", "30d", "dead jobs kept this long"),
    _s("CONVEYOR_RESULT_RETENTION", "duration", "7d", "django-celery-results rows kept"),
    _s("CONVEYOR_MAINTENANCE_RETENTION", "duration", "7d", "maintenance run records kept"),
    # --- Deployments --------------------------------------------------------------------
    _s(
        "CONVEYOR_WORKSPACES_DIR",
        "path",
        lambda values: str(values["CONVEYOR_VAR_DIR"] / "workspaces"),
        "git clones and worktrees",
        shown="var/workspaces",
    ),
    _s(
        "CONVEYOR_DEPLOYER_HOST",
        "string",
        lambda values: socket.gethostname(),
        "this deployer's host identity: its workspace rows and its queue deployments.host.<host>",
        shown="the machine's host name",
    ),
    _s(
        "CONVEYOR_DEPLOYER_TAGS",
        "string",
        "",
        "comma-separated tags of this deployer host, matched by a project's runs_on",
    ),
    _s(
        "CONVEYOR_DEPLOYER_GONE_AFTER",
        "duration",
        "2m",
        "a deployer host not seen this long is marked gone, with its workspaces",
    ),
    _s(
        "CONVEYOR_RUNS_ON_WAIT",
        "duration",
        "10m",
        "how long a deployment waits for a live deployer with its runs_on tags (then no_deployer)",
    ),
    _s("CONVEYOR_STOP_GRACE", "duration", "10s", "SIGTERM to SIGKILL when a step is stopped"),
    _s("CONVEYOR_DEPLOYMENT_TIMEOUT", "duration", "1h", "a project's timeout when it sets none"),
    _s("CONVEYOR_DEPLOYMENT_WAIT", "duration", "5s", "how long a waiting deployment sleeps"),
    _s("CONVEYOR_WORKSPACE_FETCH_INTERVAL", "duration", "5m", "how often workspaces fetch"),
    _s("CONVEYOR_WORKTREE_PRUNE_INTERVAL", "duration", "24h", "how often worktrees are pruned"),
    _s("CONVEYOR_WORKTREE_IDLE_THRESHOLD", "duration", "30d", "a worktree idle this long goes"),
    _s("CONVEYOR_WORKTREE_WARNING_LEAD", "duration", "72h", "the prune warning's lead"),
    _s("CONVEYOR_LOG_RETENTION", "duration", "90d", "deployment logs kept this long"),
    _s("CONVEYOR_APPROVAL_TIMEOUT", "duration", "24h", "how long a deployment awaits approval"),
    _s("CONVEYOR_APPROVAL_EXPIRY_INTERVAL", "duration", "1m", "how often approvals expire"),
    _s(
        "CONVEYOR_UNROUTED_CHECK_INTERVAL",
        "duration",
        "1m",
        "how often beat decides runs_on deployments while no deployer claims them",
    ),
    # --- Schedules ----------------------------------------------------------------------
    _s(
        "CONVEYOR_SCHEDULES",
        "string",
        "",
        "schedules declared in the settings: a JSON list of {name, task, cron | every, ...}",
    ),
    _s(
        "CONVEYOR_SCHEDULE_TICK",
        "duration",
        "1s",
        "how often beat's one schedules entry fires the slots that have come due",
    ),
    _s(
        "CONVEYOR_SCHEDULE_GRACE",
        "duration",
        "1m",
        "a slot first seen later than this after its time was missed (its policy applies)",
    ),
    _s("CONVEYOR_DORA_FAILURE_WINDOW", "duration", "7d", "a rollback within this is a failure"),
    # --- Webhooks -----------------------------------------------------------------------
    _s("CONVEYOR_WEBHOOKS_ENABLED", "boolean", "true", "false: in-app notifications only"),
    _s("CONVEYOR_WEBHOOK_TIMEOUT", "duration", "10s", "per HTTP attempt"),
    _s("CONVEYOR_WEBHOOK_MAX_ATTEMPTS", "integer", "6", "the first try and retries", minimum=1),
    _s(
        "CONVEYOR_WEBHOOK_DISABLE_AFTER",
        "integer",
        "10",
        "consecutive dead deliveries that disable an endpoint",
        minimum=1,
    ),
    _s("CONVEYOR_WEBHOOKS_ALLOW_PRIVATE", "boolean", "false", "allow private receivers"),
    _s("CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS", "string", "", "CIDRs allowed even when private"),
    _s("CONVEYOR_WEBHOOK_BACKOFF", "duration", "30s", "base of the retry backoff"),
    _s("CONVEYOR_WEBHOOK_BACKOFF_MAX", "duration", "15m", "longest wait between two attempts"),
    _s("CONVEYOR_WEBHOOK_RETRY_AFTER_MAX", "duration", "15m", "the most Retry-After honoured"),
    _s("CONVEYOR_WEBHOOK_RETENTION", "duration", "30d", "finished deliveries kept this long"),
    _s(
        "CONVEYOR_WEBHOOK_CONCURRENCY",
        "integer",
        "32",
        "threads of the webhooks worker: deliveries wait on receivers",
        minimum=1,
    ),
    _s(
        "CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY",
        "integer",
        lambda values: str(max(1, values["CONVEYOR_WEBHOOK_CONCURRENCY"] // 2)),
        "the most deliveries in flight to one endpoint, so a slow one cannot take every thread",
        minimum=1,
        shown="half of CONVEYOR_WEBHOOK_CONCURRENCY",
    ),
    _s(
        "CONVEYOR_WEBHOOK_ENDPOINT_RATE",
        "string",
        "",
        "N/s, N/m or N/h: the most deliveries started to one endpoint per window",
    ),
    # --- Security -----------------------------------------------------------------------
    _s("CONVEYOR_HTTPS", "boolean", "false", "behind a TLS proxy: secure cookies, HSTS"),
    _s("CONVEYOR_HSTS_MAX_AGE", "duration", "365d", "HSTS max age when CONVEYOR_HTTPS is on"),
    _s(
        "CONVEYOR_AUTH_FAILURE_LIMIT",
        "integer",
        "10",
        "failed logins or API tokens from one address before a lock-out",
        minimum=1,
    ),
    _s("CONVEYOR_AUTH_LOCKOUT", "duration", "15m", "how long a lock-out lasts"),
    _s("CONVEYOR_PROXY_COUNT", "integer", "0", "trusted reverse proxies in front of the web"),
)

NAMES = frozenset(setting.name for setting in SETTINGS)


def unknown_variables(environ: dict[str, str]) -> list[str]:
    """Return the ``CONVEYOR_*`` names in ``environ`` that no setting declares."""
    return sorted(n for n in environ if n.startswith("CONVEYOR_") and n not in NAMES)


def your_apps(value: str) -> list[str]:
    """``CONVEYOR_APPS``' names, each checked to be an importable module."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a missing parent package, or not a module name
            found = False
        if not found:
            raise ImproperlyConfigured(
                f"CONVEYOR_APPS: {name!r} is not an importable module "
                "(expected comma-separated Django apps on the Python path, e.g. billing)"
            )
    return names


def load(base_dir: Path) -> dict[str, object]:
    """Read every setting from the environment; a bad value raises ImproperlyConfigured."""
    values: dict = {"BASE_DIR": base_dir}
    for setting in SETTINGS:
        values[setting.name] = setting.read(values)
    del values["BASE_DIR"]
    return values
