"""Write project specs to the database in one transaction, idempotently.

For each project in the document: its fields are set to what the document says (a key left
out means its default); each pipeline listed is created or updated, its steps replaced only
when they differ. Pipelines the document does not list are kept, or deleted with
``prune=True`` (deployments keep their own copy of the steps, so history is unaffected).
Applying the same document twice changes nothing the second time.
"""

from dataclasses import dataclass, field

from django.db import transaction

from deployments import conf
from deployments.models import Environment, Pipeline, Project, Step
from deployments.projects_as_code.environments import EnvironmentSpec
from deployments.projects_as_code.schema import PipelineSpec, ProjectSpec, parse
from project.redaction import url_password


@dataclass
class ApplyResult:
    """What applying changed: one line per project and pipeline, and counts."""

    lines: list[str] = field(default_factory=list)
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0

    def record(self, what: str, outcome: str) -> None:
        """Note one outcome (created, updated, unchanged or deleted) for ``what``."""
        self.lines.append(f"{what}: {outcome}")
        setattr(self, outcome, getattr(self, outcome) + 1)


def apply_document(document: object, *, prune: bool = False, dry_run: bool = False) -> ApplyResult:
    """Validate ``document`` (raising InvalidDocument) and apply it."""
    return apply(parse(document), prune=prune, dry_run=dry_run)


def apply(specs: list[ProjectSpec], *, prune: bool = False, dry_run: bool = False) -> ApplyResult:
    """Create or update every project of ``specs`` in one transaction; return what changed."""
    result = ApplyResult()
    with transaction.atomic():
        for spec in specs:
            project = _project(spec, result)
            if spec.environments is not None:
                _environments(project, spec.environments, result, prune=prune)
            if spec.pipelines is None:
                continue
            for pipeline in spec.pipelines:
                _pipeline(project, pipeline, result)
            if prune:
                stale = project.pipelines.exclude(name__in=[p.name for p in spec.pipelines])
                for pipeline in stale:
                    result.record(f"pipeline {project.slug}/{pipeline.name}", "deleted")
                stale.delete()
        if dry_run:
            transaction.set_rollback(True)
    return result


def _project(spec: ProjectSpec, result: ApplyResult) -> Project:
    fields = dict(spec.fields)
    if url_password(fields["repo"]):
        result.lines.append(
            f"warning: project {spec.slug}: the repo URL carries a password; it is redacted "
            "wherever Conveyor shows it, but prefer an SSH deploy key or a git credential "
            "helper for the worker's user (docs/operations.md, Security)"
        )
    if fields["deployment_timeout"] is None:
        fields["deployment_timeout"] = int(conf.get().deployment_timeout.total_seconds())
    project = Project.objects.select_for_update().filter(slug=spec.slug).first()
    if project is None:
        project = Project.objects.create(slug=spec.slug, **fields)
        result.record(f"project {spec.slug}", "created")
        return project
    changed = [name for name, value in fields.items() if getattr(project, name) != value]
    if changed:
        for name in changed:
            setattr(project, name, fields[name])
        project.save()
    result.record(f"project {spec.slug}", "updated" if changed else "unchanged")
    return project


def _pipeline(project: Project, spec: PipelineSpec, result: ApplyResult) -> None:
    what = f"pipeline {project.slug}/{spec.name}"
    wanted = [
        {
            "name": step.name,
            "command": step.command,
            "timeout": step.timeout,
            "env": step.env,
            "continue_on_error": step.continue_on_error,
        }
        for step in spec.steps
    ]
    pipeline, created = Pipeline.objects.get_or_create(
        project=project, name=spec.name, defaults={"description": spec.description}
    )
    if not created and pipeline.snapshot() == wanted and pipeline.description == spec.description:
        result.record(what, "unchanged")
        return
    pipeline.description = spec.description
    pipeline.save()
    pipeline.steps.all().delete()
    Step.objects.bulk_create(
        Step(pipeline=pipeline, position=position, **step)
        for position, step in enumerate(wanted, start=1)
    )
    result.record(what, "created" if created else "updated")


def _environments(
    project: Project, specs: list[EnvironmentSpec], result: ApplyResult, *, prune: bool
) -> None:
    for spec in specs:
        what = f"environment {project.slug}/{spec.name}"
        found = Environment.objects.filter(project=project, name=spec.name).first()
        if found is None:
            Environment.objects.create(project=project, name=spec.name, **spec.fields)
            result.record(what, "created")
            continue
        changed = [name for name, value in spec.fields.items() if getattr(found, name) != value]
        for name in changed:
            setattr(found, name, spec.fields[name])
        if changed:
            found.save()
        result.record(what, "updated" if changed else "unchanged")
    if prune:
        stale = project.environments.exclude(name__in=[spec.name for spec in specs])
        for environment in stale:
            result.record(f"environment {project.slug}/{environment.name}", "deleted")
        stale.delete()
