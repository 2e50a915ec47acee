"""API tokens and the ``Idempotency-Key`` records kept per token.

Both tables keep the names they had in the job engine (``jobs_apitoken``,
``jobs_idempotencykey``): the move to this app changed no table (access.0001).
"""

from django.conf import settings
from django.db import models

from project.secret_fields import secret_fields


class TokenScope(models.TextChoices):
    READ = "read", "Read: a project's deployments and logs"
    DEPLOY = "deploy", "Deploy: also trigger, retry and cancel"
    ADMIN = "admin", "Admin: every project, jobs and webhooks"


SCOPE_RANK = {TokenScope.READ: 1, TokenScope.DEPLOY: 2, TokenScope.ADMIN: 3}


@secret_fields("token_hash")
class ApiToken(models.Model):
    """A bearer token for the REST API, stored only as a SHA-256 hash plus a short prefix."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True, help_text="identifies the token")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scope = models.CharField(max_length=10, choices=TokenScope.choices, default=TokenScope.READ)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="the person this token acts for (approvals need one); deactivating them "
        "stops the token",
    )
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs_apitoken"
        ordering = ["-created_at"]
        verbose_name = "API token"
        permissions = [
            ("revoke_apitoken", "Can revoke API tokens"),
            ("grant_admin_token", "Can create admin-scope API tokens or raise a token to admin"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.scope})"

    def allows(self, scope: str) -> bool:
        return SCOPE_RANK[self.scope] >= SCOPE_RANK[scope]


class IdempotencyKey(models.Model):
    """An ``Idempotency-Key`` seen on a POST: its request fingerprint and stored response."""

    key = models.CharField(max_length=200)
    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=300)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "jobs_idempotencykey"
        constraints = [
            models.UniqueConstraint(fields=["token", "path", "key"], name="idempotency_key_unique")
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.path}"

    @property
    def in_flight(self) -> bool:
        return self.status_code is None
