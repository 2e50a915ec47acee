"""Expire approvals: end deployments nobody approved or rejected in time.

Runs every ``CONVEYOR_APPROVAL_EXPIRY_INTERVAL`` (1m) from beat. A deployment still
``waiting_approval`` ``CONVEYOR_APPROVAL_TIMEOUT`` (24h) after it was created ends
``cancelled`` with reason ``approval_expired``, announced as ``deployment.cancelled`` and
audited. At most 1000 per run; the next run takes the rest.
"""

import logging
from dataclasses import dataclass

from deployments.approvals import approvals_expire

logger = logging.getLogger("deployments.maintenance")


@dataclass
class ExpiryResult:
    expired: int = 0


def expire_approvals() -> ExpiryResult:
    """End the deployments whose approval timed out; log one summary line."""
    result = ExpiryResult(expired=approvals_expire())
    logger.info("maintenance.expire_approvals", extra=vars(result))
    return result
