"""Webhook purge: delete finished deliveries, their attempts and orphaned events past retention.

What goes, with ``cutoff = now - CONVEYOR_WEBHOOK_RETENTION`` (default 30d):

* a delivery that is ``delivered``, ``dead`` or ``skipped`` and last changed (``updated_at``:
  its last status move or attempt) before the cutoff, with all its attempts. A delivery
  replayed recently is kept, however old it is;
* an event created before the cutoff that no delivery refers to any more (all of its
  deliveries were purged, its endpoints were deleted, or no endpoint subscribed to it).

A ``pending`` delivery is never deleted, however old: its job is still queued, running or
retrying, or it is stuck and an operator will replay it. Its event and attempts stay too.

How (``project.batch_delete``): one status at a time, oldest ``created_at`` first on the
``(status, created_at)`` index of deliveries (``updated_at`` is never before
``created_at``), 1,000 deliveries per statement with a short pause between statements, until
a batch comes back short. Each batch is one statement that deletes its deliveries with their
attempts and checks the filter again on each delivery it reaches, so a replay (which locks
the delivery) either comes second and finds the delivery gone, or moved it to ``pending``
first and the purge, having waited for it, keeps it. Orphaned events go the same way on the
``created_at`` index of events. Jobs are not touched: the job purge
(``maintenance.purge_jobs``) removes finished jobs on its own retention.

Runs every ``CONVEYOR_PURGE_INTERVAL`` (default 1h) as ``maintenance.purge_webhooks``.
Logs one ``maintenance.webhook_purge`` line with the counts.
"""

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from project.batch_delete import BATCH_SIZE, delete_in_batches
from webhooks import conf
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus, Event

logger = logging.getLogger("webhooks.maintenance")
# Final until an operator replays them; PENDING is deliberately absent.
FINISHED = (DeliveryStatus.DELIVERED, DeliveryStatus.DEAD, DeliveryStatus.SKIPPED)


@dataclass(frozen=True)
class WebhookPurgeResult:
    deliveries: int = 0
    attempts: int = 0
    events: int = 0


def finished_deliveries(cutoff: datetime) -> QuerySet[Delivery]:
    """Return the finished deliveries last changed before ``cutoff``."""
    return Delivery.objects.filter(
        status__in=FINISHED, created_at__lt=cutoff, updated_at__lt=cutoff
    ).order_by()


def orphaned_events(cutoff: datetime) -> QuerySet[Event]:
    """Return the events created before ``cutoff`` that no delivery refers to."""
    return (
        Event.objects.filter(created_at__lt=cutoff)
        .filter(~Exists(Delivery.objects.filter(event=OuterRef("pk"))))
        .order_by()
    )


def purge_webhooks(now: datetime | None = None, batch_size: int = BATCH_SIZE) -> WebhookPurgeResult:
    """Delete finished deliveries, their attempts and orphaned events past retention."""
    cutoff = (now or timezone.now()) - conf.get().retention
    cascaded = Counter()
    deliveries = sum(
        delete_in_batches(
            finished_deliveries(cutoff).filter(status=status),
            order_by="created_at",
            batch_size=batch_size,
            cascaded=cascaded,
        )
        for status in FINISHED
    )
    events = delete_in_batches(
        orphaned_events(cutoff), order_by="created_at", batch_size=batch_size
    )
    attempts = cascaded[DeliveryAttempt._meta.label]
    result = WebhookPurgeResult(deliveries=deliveries, attempts=attempts, events=events)
    logger.info("maintenance.webhook_purge", extra=vars(result))
    return result
