"""Deployer hosts (Deployer), a project's git clone on each (Workspace) and the per-commit
checkouts made from it (Worktree)."""

from django.db import models

from deployments.models.projects import Project
from project.secret_fields import secret_fields


@secret_fields("repo")
class Workspace(models.Model):
    """A bare clone of a project's repo under one deployer host's ``CONVEYOR_WORKSPACES_DIR``.

    One per (project, host): each deployer host clones its own copy on its own disk, and
    fetches and prunes only its own rows. ``gone_at`` is stamped when the host is marked
    gone (its rows are kept, so an operator sees what that disk held), cleared when it is
    used again.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="workspaces")
    host = models.CharField(max_length=100, help_text="the deployer host holding this clone")
    path = models.CharField(max_length=500)
    repo = models.CharField(max_length=500, help_text="the remote it was cloned from")
    last_fetched_at = models.DateTimeField(null=True, blank=True)
    last_fetch_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    gone_at = models.DateTimeField(null=True, blank=True, help_text="when its host was marked gone")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "host"], name="workspace_project_host_unique"
            )
        ]
        indexes = [models.Index(fields=["host"], name="workspace_host_idx")]

    def __str__(self) -> str:
        return f"workspace of {self.project_id} on {self.host}"


class Deployer(models.Model):
    """A deployer host: a worker host consuming the ``deployments`` queue.

    Written by each deployer worker's heartbeat (deployments.deployers): its tags, the free
    disk of its workspaces directory, ``last_seen_at``. A host not seen for
    ``CONVEYOR_DEPLOYER_GONE_AFTER`` gets ``gone_at`` (and so do its workspaces); its next
    beat clears it.
    """

    host = models.CharField(max_length=100, unique=True)
    tags = models.JSONField(default=list, blank=True)
    workspaces_dir = models.CharField(max_length=500, blank=True, default="")
    free_disk_bytes = models.BigIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["last_seen_at"], name="deployer_seen_idx")]

    def __str__(self) -> str:
        return self.host


class Worktree(models.Model):
    """A ``git worktree`` checked out at one commit, reused by every deployment of it.

    Acquire and release stamp ``last_used_at`` and clear ``prune_warning_at``; the prune
    maintenance warns before it removes a worktree idle past its threshold.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="worktrees")
    commit_sha = models.CharField(max_length=64)
    path = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField()
    prune_warning_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "commit_sha"], name="worktree_commit_unique"
            )
        ]
        indexes = [models.Index(fields=["last_used_at"], name="worktree_idle_idx")]

    def __str__(self) -> str:
        return f"{self.commit_sha[:12]} at {self.path}"
