"""What operators configure: a Project, its Pipelines and their ordered Steps."""

import re

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from project.secret_fields import secret_fields

# Unanchored: every check matches it against the whole string (re.fullmatch, or \A...\Z),
# because "$" also matches before a trailing newline ("production\n" is not "production").
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
name_validator = RegexValidator(
    rf"\A{NAME_PATTERN}\Z", "use letters, digits, '.', '_' and '-' (max 64)"
)


def canonical_environment(name: object) -> object:
    """Return an environment name in its one canonical form: ASCII lower-case.

    ``Production``, ``PRODUCTION`` and ``production`` are one environment. Only ASCII is
    folded (the name pattern allows nothing else), so no other character can fold into a
    valid name; anything that is not a string is returned unchanged for the validators.
    """
    if not isinstance(name, str):
        return name
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in name)


TAG_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def validate_tags(value: object) -> None:
    """Refuse a ``runs_on`` that is not a list of lower-case tags."""
    if not isinstance(value, list) or not all(
        isinstance(tag, str) and TAG_PATTERN.fullmatch(tag) for tag in value
    ):
        raise ValidationError(
            "a list of lower-case tags (letters, digits, '.', '_', '-'), e.g. [\"linux\", \"gpu\"]"
        )


class EnvironmentNameField(models.CharField):
    """A CharField holding an environment name, always stored and looked up canonically.

    Every write (``pre_save``) and every query value (``get_prep_value``) goes through
    ``canonical_environment``, so no path (API, admin, projects-as-code, the lock) can keep
    two spellings of one environment apart.
    """

    def to_python(self, value):
        return canonical_environment(super().to_python(value))

    def get_prep_value(self, value):
        return canonical_environment(super().get_prep_value(value))

    def pre_save(self, model_instance, add):
        value = canonical_environment(getattr(model_instance, self.attname))
        setattr(model_instance, self.attname, value)
        return value


class ConcurrencyPolicy(models.TextChoices):
    # One at a time per (project, environment), in creation order.
    QUEUE = "queue", "Queue (FIFO, one at a time)"
    # At most one running and one pending: a newer pending deployment cancels the older one.
    SUPERSEDE = "supersede", "Supersede pending"
    # The newest deployment cancels whatever runs or waits before it.
    CANCEL_IN_PROGRESS = "cancel_in_progress", "Cancel in progress"


@secret_fields("secrets", "repo")
class Project(models.Model):
    """A deployable thing: where its code comes from, its settings and its concurrency policy."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True, default="")
    repo = models.CharField(
        max_length=500, blank=True, default="", help_text="git URL or local path; empty: workdir"
    )
    workdir = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="directory steps run in when there is no repo (default: one under workspaces)",
    )
    default_environment = EnvironmentNameField(
        max_length=64, default="production", validators=[name_validator]
    )
    default_pipeline = models.CharField(
        max_length=64, default="default", validators=[name_validator]
    )
    env = models.JSONField(default=dict, blank=True, help_text="variables given to every step")
    secrets = models.JSONField(
        default=dict, blank=True, help_text="variables given to every step, masked in logs"
    )
    concurrency_policy = models.CharField(
        max_length=32, choices=ConcurrencyPolicy.choices, default=ConcurrencyPolicy.QUEUE
    )
    deployment_timeout = models.PositiveIntegerField(
        default=3600, help_text="seconds a whole deployment may run"
    )
    stop_grace = models.PositiveIntegerField(
        null=True, blank=True, help_text="seconds between SIGTERM and SIGKILL (default setting)"
    )
    strict_environments = models.BooleanField(
        default=False,
        help_text="accept deployments only to the environments declared for this project",
    )
    runs_on = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_tags],
        help_text="tags a deployer host must all have to run this project's deployments, "
        'e.g. ["linux", "gpu"]',
    )
    api_tokens = models.ManyToManyField(
        "access.ApiToken",
        blank=True,
        related_name="projects",
        help_text="read and deploy tokens that may use this project (admin tokens see all)",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Pipeline(models.Model):
    """A named, ordered list of steps of one project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="pipelines")
    name = models.CharField(max_length=64, validators=[name_validator])
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="pipeline_name_unique")
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"

    def snapshot(self) -> list[dict]:
        """Return the steps as the plain data a Deployment keeps (edits never reach it)."""
        return [step.as_snapshot() for step in self.steps.order_by("position")]


class Step(models.Model):
    """One shell command of a pipeline."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    command = models.TextField(help_text="run with /bin/sh -c")
    timeout = models.PositiveIntegerField(null=True, blank=True, help_text="seconds")
    env = models.JSONField(default=dict, blank=True)
    continue_on_error = models.BooleanField(default=False)

    class Meta:
        ordering = ["pipeline", "position"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "position"], name="step_position_unique")
        ]

    def __str__(self) -> str:
        return f"{self.pipeline}#{self.position} {self.name}"

    def as_snapshot(self) -> dict:
        """Return the step as plain data (what a Deployment keeps)."""
        return {
            "name": self.name,
            "command": self.command,
            "timeout": self.timeout,
            "env": dict(self.env or {}),
            "continue_on_error": self.continue_on_error,
        }


class EnvironmentLock(models.Model):
    """The row that serializes concurrency decisions for one (project, environment).

    Creating a deployment and claiming one both ``SELECT ... FOR UPDATE`` this row first, so
    "is anything else running here?" and "then I run" happen as one decision.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="locks")
    environment = EnvironmentNameField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "environment"], name="environment_lock_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.project_id}:{self.environment}"
