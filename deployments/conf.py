"""The deployments app's settings, typed; validated at start-up.

Each is declared once, with its default and purpose, in project/settings_registry.py (listed
in docs/configuration.md, Deployments) and read from Django settings at each call.
"""

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
    )


def validate() -> None:
    """Fail loudly at start-up on a setting that cannot work."""
    conf = get()
    env.at_least("CONVEYOR_DEPLOYMENT_TIMEOUT", conf.deployment_timeout, timedelta(seconds=1))
    env.at_least("CONVEYOR_DEPLOYMENT_WAIT", conf.wait, timedelta(seconds=1))
    env.at_least("CONVEYOR_APPROVAL_TIMEOUT", conf.approval_timeout, timedelta(minutes=1))
    if conf.worktree_warning_lead >= conf.worktree_idle_threshold:
        raise ImproperlyConfigured(
            "CONVEYOR_WORKTREE_WARNING_LEAD must be shorter than CONVEYOR_WORKTREE_IDLE_THRESHOLD"
        )
