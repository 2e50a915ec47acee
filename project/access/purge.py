"""Purge: forget ``Idempotency-Key`` records past their retention, in bounded batches.

A key answers replays for ``KEY_RETENTION`` (24 hours, project.access.idempotency); records
older than that are deleted oldest first on the ``created_at`` index, a batch per statement
(``project.batch_delete``), until a batch comes back short.

Runs every ``CONVEYOR_PURGE_INTERVAL`` (default 1h) as ``maintenance.purge_idempotency_keys``.
Logs one ``maintenance.idempotency_key_purge`` line with the count.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from project.access.idempotency import KEY_RETENTION
from project.access.models import IdempotencyKey
from project.batch_delete import BATCH_SIZE, delete_in_batches

logger = logging.getLogger("project.access")


@dataclass(frozen=True)
class KeyPurgeResult:
    idempotency_keys: int = 0


def purge_idempotency_keys(
    now: datetime | None = None, batch_size: int = BATCH_SIZE
) -> KeyPurgeResult:
    """Delete the idempotency keys older than their retention; return how many went."""
    cutoff = (now or timezone.now()) - KEY_RETENTION
    keys = delete_in_batches(
        IdempotencyKey.objects.filter(created_at__lt=cutoff),
        order_by="created_at",
        batch_size=batch_size,
    )
    result = KeyPurgeResult(idempotency_keys=keys)
    logger.info("maintenance.idempotency_key_purge", extra=vars(result))
    return result
