"""Announce a maintenance notice: a webhook event, with every active staff user's inbox.

Unlike ``jobs.services.notify_staff`` (an in-app notice only), this goes out as an event too.
"""

import webhooks
from jobs.services import staff_ids


def announce_to_staff(topic: str, data: dict) -> None:
    """Announce ``topic`` through notify(), with the active staff users as recipients."""
    webhooks.notify(topic, data, recipients=staff_ids())
