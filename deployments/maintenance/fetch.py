"""Workspace fetch: keep every project's clone up to date with its remote.

For each Workspace row of this deployer host (``CONVEYOR_DEPLOYER_HOST``; each host runs
its own round, deployments.deployers routes it there), runs ``git fetch --prune`` of
branches and tags under the project's git lock (a workspace busy with a checkout is
skipped this round). A failure is recorded in ``last_fetch_error`` and announced once as
``workspace.sync_failed`` (to staff, in-app and webhooks) when a healthy workspace starts
failing; the next success clears it. Deployments fetch for themselves too, so this only
keeps refs fresh between them.

Runs every ``CONVEYOR_WORKSPACE_FETCH_INTERVAL`` (default 5m). Logs one
``maintenance.workspace_fetch`` line.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from deployments import conf
from deployments.git import GitError
from deployments.maintenance.notices import announce_to_staff
from deployments.models import Workspace
from deployments.workspaces import LockBusy, fetch, project_lock
from project.redaction import redact_text, redact_url

logger = logging.getLogger("deployments.maintenance")


@dataclass(frozen=True)
class FetchResult:
    fetched: int = 0
    failed: int = 0
    skipped: int = 0


def fetch_workspaces() -> FetchResult:
    """Fetch every workspace of this host; return the counts."""
    fetched = failed = skipped = 0
    rows = Workspace.objects.filter(host=conf.get().deployer_host)
    for workspace in rows.select_related("project").order_by("pk"):
        if not (Path(workspace.path) / "HEAD").exists():
            skipped += 1  # not cloned yet, or its directory was removed
            continue
        try:
            with project_lock(workspace.project, wait=False):
                fetch(workspace)
            fetched += 1
        except LockBusy:
            skipped += 1
        except GitError as exc:
            failed += 1
            _record_failure(workspace, str(exc))
    result = FetchResult(fetched=fetched, failed=failed, skipped=skipped)
    logger.info("maintenance.workspace_fetch", extra=vars(result))
    return result


def _record_failure(workspace: Workspace, error: str) -> None:
    with transaction.atomic():
        was_healthy = not workspace.last_fetch_error
        repo, error = redact_url(workspace.repo), redact_text(error)
        Workspace.objects.filter(pk=workspace.pk).update(last_fetch_error=error[:2000])
        logger.warning(
            "workspace.sync_failed",
            extra={"project": workspace.project.slug, "repo": repo, "error": error[:300]},
        )
        if was_healthy:
            announce_to_staff(
                "workspace.sync_failed",
                {"project": workspace.project.slug, "repo": repo, "error": error[:1000]},
            )
