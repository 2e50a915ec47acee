"""How an environment is guarded: approval gates, a wait timer, freeze windows; and approvals.

An environment is a name deployments carry (``Deployment.environment``); it needs no row.
An ``Environment`` row, written by projects-as-code (``environments:``) or the admin, adds
rules to one (project, name). Without a row an environment is unprotected and never frozen.
"""

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from deployments.health_rules import validate_health
from deployments.models.deployments import Deployment
from deployments.models.projects import EnvironmentNameField, Project, name_validator

MAX_REQUIRED_APPROVALS = 10
MAX_REF_PATTERNS = 50
# A ref (validation.REF_PATTERN) in which '*' and '?' may also stand for characters.
REF_GLOB = re.compile(r"[A-Za-z0-9_*?][A-Za-z0-9._/@+*?-]{0,254}")


def validate_ref_patterns(value: object) -> None:
    """Refuse anything but a short list of ref globs such as ``main`` or ``release/*``."""
    if not isinstance(value, list) or len(value) > MAX_REF_PATTERNS:
        raise ValidationError(f"a list of at most {MAX_REF_PATTERNS} ref patterns")
    for pattern in value:
        if not isinstance(pattern, str) or not REF_GLOB.fullmatch(pattern) or ".." in pattern:
            raise ValidationError(f"{pattern!r} is not a ref pattern such as main or release/*")


class Environment(models.Model):
    """The rules of one (project, environment): who must approve, how long to wait, freezes."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="environments")
    name = EnvironmentNameField(max_length=64, validators=[name_validator])
    protected = models.BooleanField(
        default=False, help_text="deployments wait for approvals before they may run"
    )
    required_approvals = models.PositiveSmallIntegerField(
        default=0, help_text="distinct approvals a deployment needs (0: not protected)"
    )
    approver_users = models.JSONField(
        default=list, blank=True, help_text="usernames that may approve (empty: any approver)"
    )
    approver_groups = models.JSONField(
        default=list, blank=True, help_text="group names whose members may approve"
    )
    allow_self_approval = models.BooleanField(
        default=False, help_text="the one who triggered a deployment may approve it"
    )
    wait_timer = models.PositiveIntegerField(
        default=0, help_text="seconds after creation before a deployment may start"
    )
    refs = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_ref_patterns],
        help_text="refs that may deploy here, glob patterns such as main or release/* "
        "(empty: any ref)",
    )
    freeze = models.JSONField(
        default=list,
        blank=True,
        help_text="freeze windows (see deployments.freeze); triggers inside one are refused",
    )
    health = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_health],
        help_text="the health gate after each success (see deployments.health): window, "
        "max_failure_rate, min_events, check, rollback (empty: no gate)",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="environment_name_unique"),
            models.CheckConstraint(
                condition=Q(required_approvals__lte=MAX_REQUIRED_APPROVALS),
                name="environment_required_approvals_max",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"

    @property
    def needs_approval(self) -> bool:
        return self.protected and self.required_approvals > 0


class ApprovalDecision(models.TextChoices):
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


class Approval(models.Model):
    """One approver's decision on one deployment waiting for approval (never changed)."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="approvals")
    approver = models.CharField(max_length=200, help_text="username, or token:<name>")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decision = models.CharField(max_length=16, choices=ApprovalDecision.choices)
    comment = models.TextField(blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment", "at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "approver"], name="approval_one_per_approver"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id}: {self.decision} by {self.approver}"


MAX_LOCK_REASON = 500


class DeployLock(models.Model):
    """A hold on one (project, environment): while it is held, no new deployment goes there.

    Taken with a reason (and optionally an expiry) by an operator or a token, like Kamal's
    ``lock acquire -m``; released by whoever took it or by an admin. An expired lock no longer
    holds and is replaced by the next one taken. Unrelated to ``EnvironmentLock``, the row
    that serializes concurrency decisions.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="deploy_locks")
    environment = EnvironmentNameField(max_length=64, validators=[name_validator])
    reason = models.CharField(max_length=MAX_LOCK_REASON)
    locked_by = models.CharField(
        max_length=200, help_text="who took it, as the audit log names them"
    )
    locked_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # An id, not a name: token names are not unique, and a name can be changed.
    locked_by_token_id = models.BigIntegerField(
        null=True, blank=True, help_text="the API token that took it (its id), if one did"
    )
    locked_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True, help_text="empty: until released")

    class Meta:
        ordering = ["project__slug", "environment"]
        constraints = [
            models.UniqueConstraint(fields=["project", "environment"], name="deploy_lock_unique")
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.environment} locked by {self.locked_by}"

    def holds(self, now) -> bool:
        return self.expires_at is None or self.expires_at > now
