"""The four DORA metrics of one (project, environment), measured from deployment rows.

The window is the last ``days`` days up to now: ``[until - days, until)``. Only deployments
that *finished* in the window with status ``success`` or ``failed`` count; cancelled ones
(rejected, expired, superseded, stopped) never ran to an outcome and are ignored.

- **Deployment frequency**: the number of successful deployments (rollbacks included), and
  that number divided by ``days``.
- **Lead time for changes**: for each successful deployment that is not a rollback and whose
  commit time is known (read from git at checkout: the committer date), ``finished_at -
  committed_at``; the median, in seconds.
- **Change failure rate**: a *change* is a finished deployment that is not a rollback. It
  *failed* if it ended ``failed``, if its health gate found it unhealthy (deployments.health),
  or if it succeeded and a rollback undoing it (``undoes``) was created, not cancelled,
  within ``CONVEYOR_DORA_FAILURE_WINDOW`` (7d) of its finish.
  The rate is failed changes / changes.
- **Time to restore**: walking the window's finished deployments in finish order, a failed
  change opens an incident at its ``finished_at`` (unless one is open); the next successful
  deployment that is not itself a failed change closes it. Time to restore is the median of
  ``closed_at - opened_at``; incidents still open at the end are counted apart.
"""

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from deployments import conf
from deployments.models import Deployment, DeploymentStatus, Project
from deployments.models.deployments import HEALTH_UNHEALTHY

S = DeploymentStatus
ALLOWED_DAYS = (1, 365)


@dataclass(frozen=True)
class Row:
    pk: int
    status: str
    finished_at: datetime
    committed_at: datetime | None
    is_rollback: bool
    rolled_back: bool  # a rollback undoing it was made within the failure window
    unhealthy: bool = False  # its health gate found it unhealthy

    @property
    def is_change(self) -> bool:
        return not self.is_rollback

    @property
    def failed_change(self) -> bool:
        return self.is_change and (self.status == S.FAILED or self.rolled_back or self.unhealthy)


def dora_metrics(
    *, project: Project, environment: str, days: int, until: datetime | None = None
) -> dict:
    """Return the four metrics of ``environment`` over the ``days`` days before ``until``."""
    until = until or timezone.now()
    since = until - timedelta(days=days)
    rows = _rows(project, environment, since, until)
    successes = [row for row in rows if row.status == S.SUCCESS]
    leads = [
        (row.finished_at - row.committed_at).total_seconds()
        for row in successes
        if row.is_change and row.committed_at is not None
    ]
    changes = [row for row in rows if row.is_change]
    failed = [row for row in changes if row.failed_change]
    restores, still_open = _restores(rows)
    return {
        "project": project.slug,
        "environment": environment,
        "days": days,
        "since": since,
        "until": until,
        "deployment_frequency": {
            "deployments": len(successes),
            "per_day": round(len(successes) / days, 4),
        },
        "lead_time_for_changes": {
            "median_seconds": _median(leads),
            "measured": len(leads),
        },
        "change_failure_rate": {
            "changes": len(changes),
            "failed": len(failed),
            "rate": round(len(failed) / len(changes), 4) if changes else None,
        },
        "time_to_restore": {
            "median_seconds": _median(restores),
            "restored": len(restores),
            "open": still_open,
        },
    }


def _rows(project: Project, environment: str, since: datetime, until: datetime) -> list[Row]:
    finished = Deployment.objects.filter(
        project=project,
        environment=environment,
        status__in=[S.SUCCESS, S.FAILED],
        finished_at__gte=since,
        finished_at__lt=until,
    ).order_by("finished_at", "pk")
    values = list(
        finished.values_list(
            "pk", "status", "finished_at", "committed_at", "rollback_of_id", "health__status"
        )
    )
    rolled_back = _rolled_back([pk for pk, status, *_ in values if status == S.SUCCESS])
    return [
        Row(
            pk=pk,
            status=status,
            finished_at=finished_at,
            committed_at=committed_at,
            is_rollback=rollback_of is not None,
            rolled_back=_within(rolled_back.get(pk), finished_at),
            unhealthy=health == HEALTH_UNHEALTHY,
        )
        for pk, status, finished_at, committed_at, rollback_of, health in values
    ]


def _rolled_back(ids: list[int]) -> dict[int, datetime]:
    """Map each deployment some non-cancelled rollback undoes to that rollback's creation."""
    found: dict[int, datetime] = {}
    rollbacks = (
        Deployment.objects.filter(undoes_id__in=ids, rollback_of__isnull=False)
        .exclude(status=S.CANCELLED)
        .order_by("created_at")
        .values_list("undoes_id", "created_at")
    )
    for undone, created_at in rollbacks:
        found.setdefault(undone, created_at)
    return found


def _within(rolled_back_at: datetime | None, finished_at: datetime) -> bool:
    if rolled_back_at is None:
        return False
    return rolled_back_at - finished_at <= conf.get().dora_failure_window


def _restores(rows: list[Row]) -> tuple[list[float], int]:
    restores, opened = [], None
    for row in rows:
        if row.failed_change:
            opened = opened or row.finished_at
        elif row.status == S.SUCCESS and opened is not None:
            restores.append((row.finished_at - opened).total_seconds())
            opened = None
    return restores, int(opened is not None)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None
