"""The deployments app's settings, typed, with their defaults; validated at start-up.

Declared in project/settings_registry.py and read from Django settings at each call:

``CONVEYOR_WORKSPACES_DIR``      where workspaces, worktrees and default workdirs live
                                 (default ``var/workspaces``)
``CONVEYOR_STOP_GRACE``          SIGTERM-to-SIGKILL grace when a step is stopped (10s)
``CONVEYOR_DEPLOYMENT_TIMEOUT``  timeout of a project created without one (1h)
``CONVEYOR_DEPLOYMENT_WAIT``     how long a deployment that must wait snoozes before it looks
                                 again; the one before it wakes it earlier when it ends (5s)
``CONVEYOR_WORKTREE_IDLE_THRESHOLD``  a worktree unused this long is pruned (30d)
``CONVEYOR_WORKTREE_WARNING_LEAD``    ... after a ``worktree.prune_pending`` notice this early (72h)
``CONVEYOR_LOG_RETENTION``       logs of deployments finished longer ago are deleted (90d)
``CONVEYOR_APPROVAL_TIMEOUT``    a deployment still waiting for approval this long after its
                                 creation ends ``cancelled/approval_expired`` (24h)
``CONVEYOR_APPROVAL_EXPIRY_INTERVAL``  how often beat looks for expired approvals (1m)
``CONVEYOR_DORA_FAILURE_WINDOW``  a successful deployment rolled back within this long
                                 after it finished counts as a failed change (7d)
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
