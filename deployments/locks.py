"""The per-(project, environment) lock row that serializes concurrency decisions.

Taken (``SELECT ... FOR UPDATE``) by create, claim, cancel and the runner's finish, always
before any other row of the transaction, so that "does anything else run here?", "then I
wait" and "I am done, wake the next one" can never interleave into a lost wake-up.
"""

from deployments.models import EnvironmentLock
from deployments.models.projects import canonical_environment


def lock_environment(project_id: int, environment: str) -> EnvironmentLock:
    """Take (creating it if needed) the lock row of one (project, environment).

    The name is canonicalised here too, so two spellings can never hold two locks.
    """
    environment = canonical_environment(environment)
    EnvironmentLock.objects.bulk_create(
        [EnvironmentLock(project_id=project_id, environment=environment)], ignore_conflicts=True
    )
    return EnvironmentLock.objects.select_for_update().get(
        project_id=project_id, environment=environment
    )
