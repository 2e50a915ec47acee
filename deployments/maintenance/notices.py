"""Send a maintenance notice to every active staff user (in-app) and to webhooks."""

import webhooks
from jobs.services import staff_ids


def notify_staff(topic: str, data: dict) -> None:
    """Announce ``topic`` through notify(), with the active staff users as recipients."""
    webhooks.notify(topic, data, recipients=staff_ids())
