"""Worktree prune: warn about, then remove, worktrees nobody deployed for a long time.

A worktree idle for ``CONVEYOR_WORKTREE_IDLE_THRESHOLD`` (30d) minus
``CONVEYOR_WORKTREE_WARNING_LEAD`` (72h) gets ``prune_warning_at`` and a
``worktree.prune_pending`` notice (staff, in-app and webhooks). One that is idle past the
threshold and was warned at least the lead ago is removed (``git worktree remove``, its
row deleted) with a ``worktree.pruned`` notice. Using a worktree (a deployment acquiring or
releasing it) clears the warning, so a warned worktree that is used again is kept. A
worktree a running deployment uses is never removed.

Each deployer host prunes only the worktrees of its own workspaces (``CONVEYOR_DEPLOYER_HOST``;
deployments.deployers routes a round to every live host), so a worktree used on one host
never keeps another host's copy of the same commit alive.

Runs every ``CONVEYOR_WORKTREE_PRUNE_INTERVAL`` (default 24h). Logs one
``maintenance.worktree_prune`` line.
"""

import logging
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from deployments import conf
from deployments.git import GitError, git
from deployments.maintenance.notices import announce_to_staff
from deployments.models import ACTIVE, Worktree
from deployments.workspaces import LockBusy, project_lock

logger = logging.getLogger("deployments.maintenance")
BATCH_SIZE = 1000


@dataclass(frozen=True)
class PruneResult:
    warned: int = 0
    pruned: int = 0
    kept_in_use: int = 0
    skipped_busy: int = 0
    skipped_elsewhere: int = 0  # the clone is missing from this host's disk


def _notice(worktree: Worktree, **extra) -> dict:
    return {
        "project": worktree.workspace.project.slug,
        "commit": worktree.commit_sha,
        "path": worktree.path,
        "last_used_at": worktree.last_used_at.isoformat(),
        **extra,
    }


def prune_worktrees(now: datetime | None = None) -> PruneResult:
    """Warn about soon-idle worktrees and remove the idle, warned ones; return the counts."""
    now = now or timezone.now()
    options = conf.get()
    threshold, lead = options.worktree_idle_threshold, options.worktree_warning_lead
    warned = _warn(now, threshold, lead)
    candidates = _this_host().filter(
        prune_warning_at__isnull=False,
        prune_warning_at__lte=now - lead,
        last_used_at__lt=now - threshold,
    )[:BATCH_SIZE]
    pruned = in_use = busy = elsewhere = 0
    for worktree in candidates:
        if worktree.deployments.filter(status__in=ACTIVE).exists():
            in_use += 1
            continue
        if not (Path(worktree.workspace.path) / "HEAD").exists():
            elsewhere += 1
            continue
        try:
            pruned += _remove(worktree, now, threshold, lead)
        except LockBusy:
            busy += 1
    result = PruneResult(
        warned=warned,
        pruned=pruned,
        kept_in_use=in_use,
        skipped_busy=busy,
        skipped_elsewhere=elsewhere,
    )
    logger.info("maintenance.worktree_prune", extra=vars(result))
    return result


def _this_host():
    return Worktree.objects.select_related("workspace__project").filter(
        workspace__host=conf.get().deployer_host
    )


def _warn(now, threshold, lead) -> int:
    soon_idle = _this_host().filter(
        prune_warning_at__isnull=True, last_used_at__lt=now - (threshold - lead)
    )[:BATCH_SIZE]
    count = 0
    for worktree in soon_idle:
        with transaction.atomic():
            marked = Worktree.objects.filter(
                pk=worktree.pk, prune_warning_at__isnull=True, last_used_at=worktree.last_used_at
            ).update(prune_warning_at=now)
            if marked:
                prune_at = max(worktree.last_used_at + threshold, now + lead)
                announce_to_staff(
                    "worktree.prune_pending", _notice(worktree, prune_at=prune_at.isoformat())
                )
                count += 1
    return count


def _remove(worktree: Worktree, now, threshold, lead) -> int:
    workspace = worktree.workspace
    with project_lock(workspace.project, wait=False), transaction.atomic():
        # Re-check under the lock: a deployment may have used it since the query.
        fresh = (
            Worktree.objects.select_for_update()
            .filter(
                pk=worktree.pk,
                prune_warning_at__lte=now - lead,
                last_used_at__lt=now - threshold,
            )
            .first()
        )
        if fresh is None or fresh.deployments.filter(status__in=ACTIVE).exists():
            return 0
        path = Path(fresh.path)
        try:
            git("worktree", "remove", "--force", str(path), cwd=workspace.path)
        except GitError:  # not a registered worktree any more: remove what is left
            shutil.rmtree(path, ignore_errors=True)
            git("worktree", "prune", cwd=workspace.path)
        fresh.delete()
        announce_to_staff("worktree.pruned", _notice(worktree))
    return 1
