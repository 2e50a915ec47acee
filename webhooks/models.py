"""Endpoints, the events Conveyor announced, one delivery per (event, endpoint), its attempts."""

import json
import secrets

from django.db import models
from django.db.models import Q

from jobs.models import Job
from project.secret_fields import secret_fields


def new_message_id() -> str:
    """Return a fresh public event id: ``evt_`` and 26 URL-safe characters."""
    return f"evt_{secrets.token_urlsafe(20)[:26]}"


class DisabledBy(models.TextChoices):
    # An operator (admin action or API). Events for the endpoint are not stored for it.
    MANUAL = "manual", "Manual"
    # CONVEYOR_WEBHOOK_DISABLE_AFTER consecutive dead deliveries. Events are stored as skipped.
    FAILURES = "failures", "Consecutive failures"
    # The receiver answered 410 Gone. Events are stored as skipped.
    GONE = "gone", "410 Gone"


# Endpoints disabled by Conveyor rather than by a person keep collecting skipped deliveries,
# so that what they missed can be replayed once someone enables them again.
COLLECTS_SKIPPED = (DisabledBy.FAILURES, DisabledBy.GONE)


@secret_fields("secret", "previous_secret", "url")
class Endpoint(models.Model):
    """A receiver URL subscribed to some topics, with the secret its deliveries are signed with."""

    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=300, blank=True, default="")
    topics = models.JSONField(default=list, help_text="topics this endpoint receives")
    secret = models.CharField(max_length=100, help_text="whsec_ + base64 of 32 random bytes")
    previous_secret = models.CharField(max_length=100, blank=True, default="")
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_by = models.CharField(max_length=16, choices=DisabledBy.choices, blank=True)
    disabled_reason = models.TextField(blank=True, default="")
    disabled_at = models.DateTimeField(null=True, blank=True)
    consecutive_dead = models.PositiveIntegerField(
        default=0, help_text="dead deliveries since the last delivered one"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        permissions = [
            ("rotate_secret", "Can rotate an endpoint's signing secret (and read the new one)"),
            ("send_test", "Can send a test event to an endpoint"),
        ]

    def __str__(self) -> str:
        # Never the URL: it may carry a credential (Slack-style), and a name is shown wherever
        # an endpoint is referred to (filters, deliveries, messages) to anyone who may view them.
        label = f"Endpoint {self.pk}"
        return f"{label} ({self.description})" if self.description else label


class Event(models.Model):
    """One announcement, stored with the exact JSON body every endpoint receives."""

    message_id = models.CharField(max_length=40, unique=True, default=new_message_id)
    type = models.CharField(max_length=100)
    body = models.TextField(help_text='{"id", "type", "timestamp", "data"} as sent')
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["type", "created_at"], name="webhook_event_type_idx")]

    def __str__(self) -> str:
        return f"{self.type} {self.message_id}"

    @property
    def data(self):
        return json.loads(self.body).get("data")


class DeliveryStatus(models.TextChoices):
    # Written by notify(), send_test and replay; its job is queued, running or retrying.
    # Left by the deliver task (delivered, skipped) or the job_dead receiver (dead).
    PENDING = "pending", "Pending"
    # Final until an operator replays it.
    DELIVERED = "delivered", "Delivered"
    # Its job died (attempts spent, a permanent failure, 410). Left only by a replay.
    DEAD = "dead", "Dead"
    # Its endpoint was disabled, so no job ran. Left only by a replay.
    SKIPPED = "skipped", "Skipped"


D = DeliveryStatus

# The one table of allowed moves; webhooks.transitions.delivery_move() enforces it.
TRANSITIONS: dict[str, frozenset[str]] = {
    D.PENDING: frozenset({D.DELIVERED, D.DEAD, D.SKIPPED}),
    D.DELIVERED: frozenset({D.PENDING}),
    D.DEAD: frozenset({D.PENDING}),
    D.SKIPPED: frozenset({D.PENDING}),
}


@secret_fields("last_error")
class Delivery(models.Model):
    """One event for one endpoint: the unit that is retried, dead-lettered and replayed."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=D.PENDING)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    replays = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"
        permissions = [("replay_delivery", "Can replay webhook deliveries")]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "endpoint"], name="delivery_once_per_endpoint"
            ),
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["endpoint", "status", "created_at"], name="delivery_endpoint_idx"),
            models.Index(fields=["status", "created_at"], name="delivery_status_idx"),
        ]

    def __str__(self) -> str:
        return f"Delivery {self.pk} [{self.status}]"


class AttemptOutcome(models.TextChoices):
    DELIVERED = "delivered", "Delivered (2xx)"
    RETRY = "retry", "Retryable failure"
    FAILED = "failed", "Permanent failure"
    GONE = "gone", "410 Gone"
    REFUSED = "refused", "Refused by the SSRF guard"
    # Nothing was sent (the delivery was no longer pending, or its endpoint is disabled);
    # returned by delivery_attempt, never stored as an attempt.
    SKIPPED = "skipped", "Skipped (nothing sent)"


@secret_fields("response_body", "error")
class DeliveryAttempt(models.Model):
    """One HTTP attempt of a delivery: what was answered, how fast, or what went wrong."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempts")
    job_id = models.BigIntegerField(null=True, blank=True)
    number = models.PositiveIntegerField(help_text="the job's attempt number")
    started_at = models.DateTimeField()
    address = models.GenericIPAddressField(null=True, blank=True, help_text="IP connected to")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, default="", help_text="first 4 KiB")
    error = models.TextField(blank=True, default="")
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}: {self.outcome}"
