"""The deployments app's settings, typed; validated at start-up.

Each is declared once, with its default and purpose, in project/settings_registry.py (listed
in docs/configuration.md, Deployments) and read from Django settings at each call.
"""

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from project import env

# Flush the log at least this often and at this size; a chunk never holds more.
LOG_CHUNK_BYTES = 64 * 1024
LOG_FLUSH_SECONDS = 1.0
# The runner extends the job lease and looks at the cancel flag this often while a step runs.
HEARTBEAT_SECONDS = 1.0
# A host identity becomes part of a queue name (deployments.host.<host>) and a directory name.
HOST_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class DeploymentSettings:
    workspaces_dir: Path
    stop_grace: timedelta
    deployment_timeout: timedelta
    wait: timedelta
    worktree_idle_threshold: timedelta
    worktree_warning_lead: timedelta
    log_retention: timedelta
    approval_timeout: timedelta
    dora_failure_window: timedelta
    deployer_host: str
    deployer_tags: tuple[str, ...]
    deployer_gone_after: timedelta
    runs_on_wait: timedelta


def get() -> DeploymentSettings:
    """Return the settings in force (read each call so tests can override them)."""
    return DeploymentSettings(
        workspaces_dir=Path(settings.CONVEYOR_WORKSPACES_DIR),
        stop_grace=settings.CONVEYOR_STOP_GRACE,
        deployment_timeout=settings.CONVEYOR_DEPLOYMENT_TIMEOUT,
        wait=settings.CONVEYOR_DEPLOYMENT_WAIT,
        worktree_idle_threshold=settings.CONVEYOR_WORKTREE_IDLE_THRESHOLD,
        worktree_warning_lead=settings.CONVEYOR_WORKTREE_WARNING_LEAD,
        log_retention=settings.CONVEYOR_LOG_RETENTION,
        approval_timeout=settings.CONVEYOR_APPROVAL_TIMEOUT,
        dora_failure_window=settings.CONVEYOR_DORA_FAILURE_WINDOW,
        deployer_host=settings.CONVEYOR_DEPLOYER_HOST,
        deployer_tags=parse_tags(settings.CONVEYOR_DEPLOYER_TAGS),
        deployer_gone_after=settings.CONVEYOR_DEPLOYER_GONE_AFTER,
        runs_on_wait=settings.CONVEYOR_RUNS_ON_WAIT,
    )


def parse_tags(raw: str) -> tuple[str, ...]:
    """Return the tags of a comma-separated list, stripped, lower-cased, sorted, unique."""
    return tuple(sorted({tag.strip().lower() for tag in raw.split(",") if tag.strip()}))


def validate() -> None:
    """Fail loudly at start-up on a setting that cannot work."""
    conf = get()
    env.at_least("CONVEYOR_DEPLOYMENT_TIMEOUT", conf.deployment_timeout, timedelta(seconds=1))
    env.at_least("CONVEYOR_DEPLOYMENT_WAIT", conf.wait, timedelta(seconds=1))
    env.at_least("CONVEYOR_APPROVAL_TIMEOUT", conf.approval_timeout, timedelta(minutes=1))
    if not HOST_PATTERN.fullmatch(conf.deployer_host):
        raise ImproperlyConfigured(
            f"CONVEYOR_DEPLOYER_HOST: {conf.deployer_host!r} is not a host identity "
            "(letters, digits, '.', '_', '-'; at most 100)"
        )
    env.at_least(
        "CONVEYOR_DEPLOYER_GONE_AFTER",
        conf.deployer_gone_after,
        3 * settings.CONVEYOR_WORKER_HEARTBEAT,
    )
    if conf.worktree_warning_lead >= conf.worktree_idle_threshold:
        raise ImproperlyConfigured(
            "CONVEYOR_WORKTREE_WARNING_LEAD must be shorter than CONVEYOR_WORKTREE_IDLE_THRESHOLD"
        )
