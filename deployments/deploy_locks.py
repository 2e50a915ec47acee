"""Deploy locks: hold an environment so that no new deployment goes there until released.

An operator takes one with a reason (and optionally an expiry) before a risky migration or
an incident, as Kamal's ``lock acquire -m`` does. While it holds, every way of creating a
deployment there — trigger, retry, rollback — is refused with 409 ``environment_locked``
naming who locked it and why (``refuse_if_locked``, called by deployments.creation under
the environment's serializing lock, so a lock taken and a trigger can't cross). Deployments
already created are not touched: a running one finishes, one waiting for approval still
waits. Whoever took the lock (the same person, or for a lock taken by a token without a
person, the same token) or an admin releases it; taking, replacing and releasing are
audited. An expired lock no longer holds; the next lock taken replaces it.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from deployments.environments import check_declared, rules_of
from deployments.errors import EnvironmentLocked, InvalidRequest, NotLocked, NotLockHolder
from deployments.locks import lock_environment
from deployments.models import DeployLock, Project
from deployments.models.environments import MAX_LOCK_REASON
from deployments.models.projects import canonical_environment
from deployments.validation import clean_environment
from jobs.models import AuditLog

# The longest a lock may be taken for with an expiry (without one it holds until released).
MAX_EXPIRY = timedelta(days=90)
# A lock makes an environment exist for the lists: bounded, so locks can't flood them.
MAX_LOCKS_PER_PROJECT = 100


@dataclass(frozen=True)
class Holder:
    """Who takes or releases a lock: a person, a token, or a person through a token."""

    label: str
    user: object | None = None
    token_id: int | None = None
    admin: bool = False

    def took(self, lock: DeployLock) -> bool:
        """True if this holder is the one who took ``lock``."""
        if lock.locked_by_user_id is not None:
            return self.user is not None and self.user.pk == lock.locked_by_user_id
        return self.token_id is not None and self.token_id == lock.locked_by_token_id


def current_lock(project: Project, environment: str, *, now: datetime | None = None):
    """The lock that holds ``environment`` now, or None (an expired one doesn't hold)."""
    lock = DeployLock.objects.filter(project=project, environment=environment).first()
    if lock is None or not lock.holds(now or timezone.now()):
        return None
    return lock


def refuse_if_locked(project: Project, environment: str) -> None:
    """Raise EnvironmentLocked if a deploy lock holds ``environment`` of ``project``."""
    environment = canonical_environment(environment)
    lock = current_lock(project, environment)
    if lock is not None:
        raise _locked(project, lock)


def _locked(project: Project, lock: DeployLock) -> EnvironmentLocked:
    until = f" until {lock.expires_at.isoformat()}" if lock.expires_at else ""
    return EnvironmentLocked(
        f"environment {lock.environment!r} of project {project.slug} is locked by "
        f"{lock.locked_by}{until}: {lock.reason}",
        lock=lock,
    )


def lock_acquire(
    project: Project,
    environment: str,
    *,
    reason: str,
    holder: Holder,
    expires_in: timedelta | None = None,
) -> DeployLock:
    """Lock ``environment``; return the lock.

    Taking a lock one already holds updates its reason and expiry. A lock held by someone
    else raises EnvironmentLocked (release it first, or wait for its expiry).
    """
    environment = clean_environment(environment)
    reason = _clean_reason(reason)
    if expires_in is not None and not timedelta(0) < expires_in <= MAX_EXPIRY:
        raise InvalidRequest(
            "expires_in must be more than 0 and at most 90 days", field="expires_in"
        )
    with transaction.atomic():
        lock_environment(project.pk, environment)
        now = timezone.now()  # after the serializing lock: no deployment admitted after it
        check_declared(project, rules_of(project, environment))
        replaced = DeployLock.objects.filter(project=project, environment=environment).first()
        if replaced is not None and replaced.holds(now) and not holder.took(replaced):
            raise _locked(project, replaced)
        if replaced is None and _locks_of(project) >= MAX_LOCKS_PER_PROJECT:
            raise InvalidRequest(
                f"project {project.slug} already has {MAX_LOCKS_PER_PROJECT} deploy locks; "
                "release one first",
                field="environment",
            )
        if replaced is not None:  # one's own, or an expired one: taken again
            replaced.delete()
        lock = DeployLock.objects.create(
            project=project,
            environment=environment,
            reason=reason,
            locked_by=holder.label,
            locked_by_user=holder.user,
            locked_by_token_id=holder.token_id,
            locked_at=now,
            expires_at=now + expires_in if expires_in else None,
        )
        details = {"reason": reason, "expires_at": _iso(lock.expires_at)}
        if replaced is not None:
            details["replaced"] = {"locked_by": replaced.locked_by, "reason": replaced.reason}
        _audit(holder.label, "environment.lock", project, environment, details)
    return lock


def lock_release(project: Project, environment: str, *, holder: Holder) -> DeployLock:
    """Release the lock on ``environment`` (its holder or an admin); return what was held."""
    environment = clean_environment(environment)
    with transaction.atomic():
        lock_environment(project.pk, environment)
        lock = current_lock(project, environment)
        if lock is None:
            raise NotLocked(f"environment {environment!r} of project {project.slug} is not locked")
        if not (holder.took(lock) or holder.admin):
            raise NotLockHolder(
                f"only {lock.locked_by} (who took the lock) or an admin may release it"
            )
        lock.delete()
        _audit(
            holder.label,
            "environment.unlock",
            project,
            environment,
            {"locked_by": lock.locked_by, "reason": lock.reason},
        )
    return lock


def _locks_of(project: Project) -> int:
    return DeployLock.objects.filter(project=project).count()


def lock_as_dict(lock: DeployLock | None) -> dict | None:
    if lock is None:
        return None
    return {
        "environment": lock.environment,
        "reason": lock.reason,
        "locked_by": lock.locked_by,
        "locked_at": lock.locked_at,
        "expires_at": lock.expires_at,
    }


def _clean_reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest("reason must say why the environment is locked", field="reason")
    if len(reason) > MAX_LOCK_REASON or "\x00" in reason:
        raise InvalidRequest(
            f"reason must be at most {MAX_LOCK_REASON} characters of text", field="reason"
        )
    return reason.strip()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _audit(actor: str, action: str, project: Project, environment: str, details: dict) -> None:
    AuditLog.objects.create(
        actor=actor,
        action=action,
        target_type="environment",
        target_id=f"{project.slug}/{environment}",
        details=details,
    )
