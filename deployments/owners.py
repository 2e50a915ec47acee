"""Deployments own their ``deployments.run`` jobs: how the Jobs pages show and act on them.

A retry of the job is a retry of the deployment (a new deployment with ``retry_of``, only
once the old one has finished); a cancel is the deployment's cancel. Registered with the
job engine in ``DeploymentsConfig.ready``.
"""

from deployments import creation, services
from deployments.errors import DeploymentError
from deployments.models import Deployment, DeploymentStatus
from jobs import owners
from jobs.models import Job
from project.admin_urls import url_per_pk


def _info(deployment: Deployment, change_url=None) -> owners.OwnerInfo:
    """Describe ``deployment``; ``change_url`` (``pk -> URL``) saves a page a reverse per row."""
    change_url = change_url or url_per_pk("admin:deployments_deployment_change")
    return owners.OwnerInfo(
        kind="deployment",
        id=deployment.pk,
        label=f"deployment {deployment.pk} ({deployment.project.slug}/"
        f"{deployment.environment}@{deployment.ref})",
        status=deployment.status,
        url=change_url(deployment.pk),
        failed=deployment.status == DeploymentStatus.FAILED,
        api_path=f"/api/v1/deployments/{deployment.pk}",
    )


def _describe(jobs: list[Job]) -> dict[int, owners.OwnerInfo]:
    ids = {job.pk: (job.payload or {}).get("deployment_id") for job in jobs}
    # Only what the label shows, not the pipeline snapshot and parameters of each.
    found = (
        Deployment.objects.select_related("project")
        .only("status", "environment", "ref", "project__slug")
        .in_bulk([i for i in ids.values() if i is not None])
    )
    change_url = url_per_pk("admin:deployments_deployment_change")
    return {
        job_id: _info(found[deployment_id], change_url)
        for job_id, deployment_id in ids.items()
        if deployment_id in found
    }


def _deployment_id(job: Job) -> int:
    deployment_id = (job.payload or {}).get("deployment_id")
    if deployment_id is None:
        raise owners.OwnerRefused(f"job {job.pk} names no deployment")
    return int(deployment_id)


def _retry(job: Job, actor: str, user=None) -> Job | owners.OwnerInfo:
    try:
        new = services.deployment_retry(
            deployment_id=_deployment_id(job), triggered_by=actor, triggered_by_user=user
        )
    except DeploymentError as exc:
        raise owners.OwnerRefused(str(exc)) from exc
    if new.job_id is None:  # waiting for approval: the new deployment is what was made
        return _info(new)
    return Job.objects.get(pk=new.job_id)


def _cancel(job: Job, actor: str) -> Job:
    try:
        services.deployment_cancel(deployment_id=_deployment_id(job), actor=actor)
    except DeploymentError as exc:
        raise owners.OwnerRefused(str(exc)) from exc
    return Job.objects.get(pk=job.pk)


def _failed_job_ids():
    return Deployment.objects.filter(status=DeploymentStatus.FAILED, job_id__isnull=False).values(
        "job_id"
    )


def _jobs_of_deployment(deployment_id: int):
    return Deployment.objects.filter(pk=deployment_id, job_id__isnull=False).values("job_id")


def _jobs_of_project(project_id: int):
    return Deployment.objects.filter(project_id=project_id, job_id__isnull=False).values("job_id")


OWNER = owners.Owner(
    describe=_describe,
    retry=_retry,
    cancel=_cancel,
    failed_job_ids=_failed_job_ids,
    notes={
        "retry": "Retry creates a new deployment (retry_of this one) once it has finished.",
        "cancel": "Cancel cancels the deployment (a running one is stopped first).",
    },
    jobs_of={"deployment": _jobs_of_deployment, "project": _jobs_of_project},
)


def register() -> None:
    owners.register(creation.RUN_TASK, OWNER)
