"""A project's git clone (Workspace) and the per-commit checkouts made from it (Worktree)."""

from django.db import models

from deployments.models.projects import Project
from project.secret_fields import secret_fields


@secret_fields("repo")
class Workspace(models.Model):
    """A bare clone of a project's repo under ``CONVEYOR_WORKSPACES_DIR``."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="workspace")
    path = models.CharField(max_length=500)
    repo = models.CharField(max_length=500, help_text="the remote it was cloned from")
    last_fetched_at = models.DateTimeField(null=True, blank=True)
    last_fetch_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"workspace of {self.project_id}"


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
