"""What operators and the engine tell people: the audit log and the in-app inbox."""

from django.conf import settings
from django.db import models


class AuditLog(models.Model):
    """An operator action or a dead letter: who did what to which object, and when."""

    actor = models.CharField(max_length=200, help_text="username, token name or 'system'")
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=100)
    target_id = models.CharField(max_length=100)
    details = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target_idx")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"


class Notification(models.Model):
    """An in-app notice in a user's inbox (dead letters, prune warnings, ...)."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    topic = models.CharField(max_length=100)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["recipient", "read_at"], name="notification_inbox_idx")]

    def __str__(self) -> str:
        return f"{self.topic}: {self.title}"
