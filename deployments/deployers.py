"""Deployer hosts: which hosts run deployments, with which tags, and which of them are gone.

A deployer is a worker consuming the ``deployments`` queue (or only its host's queue, named
with ``-Q``, for a host that takes pinned work alone). Its host identity is
``CONVEYOR_DEPLOYER_HOST`` (default the machine's host name) and its tags
``CONVEYOR_DEPLOYER_TAGS``. When such a worker starts it also consumes its host's own queue,
``deployments.host.<host>`` (``celeryd_after_setup``), where the jobs meant for that host
alone go: its rounds of workspace fetch and worktree prune (deployments.maintenance), and
the deployments of projects pinned to it by ``runs_on``.

Each report of a deployer worker (jobs.worker_registry, every
``CONVEYOR_WORKER_HEARTBEAT``) upserts its host's ``Deployer`` row: tags, workspaces
directory, its free disk, ``last_seen_at``; and marks gone the hosts not seen for
``CONVEYOR_DEPLOYER_GONE_AFTER`` (2m) — ``gone_at`` on the Deployer and on its Workspace
rows, which are kept (an operator sees what that disk held) until the host beats again. The
fetch and prune fan-out runners mark gone hosts too, so a fleet whose deployers all stopped
is still marked.
"""

import logging
import shutil
from collections.abc import Iterable
from datetime import datetime

from celery import signals
from django.db import transaction
from django.utils import timezone

from deployments import conf
from deployments.models import Deployer, Workspace
from jobs import queues, worker_registry
from project.secretfiles import private_dir

logger = logging.getLogger("deployments.deployers")

DEPLOYMENTS_QUEUE = "deployments"
HOST_QUEUE_PREFIX = "deployments.host."


def host_queue(host: str) -> str:
    """Return the queue that only deployer host ``host`` consumes."""
    return f"{HOST_QUEUE_PREFIX}{host}"


def live() -> Iterable[Deployer]:
    """Return the deployer hosts not marked gone and seen within the gone-after time."""
    cutoff = timezone.now() - conf.get().deployer_gone_after
    return Deployer.objects.filter(gone_at__isnull=True, last_seen_at__gte=cutoff).order_by("host")


def with_tags(tags: Iterable[str]) -> list[Deployer]:
    """Return the live deployers having every one of ``tags``."""
    wanted = set(tags)
    return [deployer for deployer in live() if wanted <= set(deployer.tags)]


def free_disk(path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def deployer_beat(*, now: datetime | None = None) -> Deployer:
    """Write this host's Deployer row (and clear the gone mark of its workspaces)."""
    now = now or timezone.now()
    options = conf.get()
    directory = private_dir(options.workspaces_dir)
    deployer, _ = Deployer.objects.update_or_create(
        host=options.deployer_host,
        defaults={
            "tags": list(options.deployer_tags),
            "workspaces_dir": str(directory),
            "free_disk_bytes": free_disk(directory),
            "last_seen_at": now,
            "gone_at": None,
        },
        create_defaults={
            "tags": list(options.deployer_tags),
            "workspaces_dir": str(directory),
            "free_disk_bytes": free_disk(directory),
            "started_at": now,
            "last_seen_at": now,
        },
    )
    Workspace.objects.filter(host=options.deployer_host, gone_at__isnull=False).update(gone_at=None)
    return deployer


def mark_gone(*, now: datetime | None = None) -> int:
    """Mark gone every deployer not seen for the gone-after time, and its workspaces.

    Deployments routed to a gone host's queue go back to ``deployments`` to be decided again.
    """
    from deployments import routing

    now = now or timezone.now()
    cutoff = now - conf.get().deployer_gone_after
    count = 0
    for host in Deployer.objects.filter(gone_at__isnull=True, last_seen_at__lt=cutoff).values_list(
        "host", flat=True
    ):
        with transaction.atomic():
            # Guarded: a beat that came in since the query keeps the host alive.
            marked = Deployer.objects.filter(
                host=host, gone_at__isnull=True, last_seen_at__lt=cutoff
            ).update(gone_at=now)
            if marked:
                Workspace.objects.filter(host=host, gone_at__isnull=True).update(gone_at=now)
                returned = routing.return_from_gone([host])
                logger.warning("deployer.gone", extra={"host": host, "jobs_returned": returned})
                count += 1
    return count


def _on_report(info: dict) -> None:
    consumed = set(info["queues"])
    if not consumed & {DEPLOYMENTS_QUEUE, host_queue(conf.get().deployer_host)}:
        return  # not a deployer
    deployer_beat()
    mark_gone()


@signals.celeryd_after_setup.connect(dispatch_uid="deployments.deployers.host_queue")
def _consume_host_queue(sender=None, instance=None, **kwargs) -> None:
    """A worker consuming ``deployments`` also consumes its host's own queue."""
    amqp_queues = instance.app.amqp.queues
    consumed = amqp_queues.consume_from
    if consumed is None or DEPLOYMENTS_QUEUE in consumed:
        amqp_queues.select_add(host_queue(conf.get().deployer_host))


def _live_host_queues() -> list[str]:
    return [host_queue(deployer.host) for deployer in live()]


def register() -> None:
    """Hook deployers into the engine: the worker registry's reports and the queue list."""
    worker_registry.on_report(_on_report, name="deployments.deployers")
    queues.add_provider(_live_host_queues, name="deployments.deployers")
