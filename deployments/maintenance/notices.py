"""Send a maintenance notice to every active staff user (in-app) and to webhooks."""

from django.contrib.auth import get_user_model

import webhooks


def notify_staff(topic: str, data: dict) -> None:
    """Announce ``topic`` through notify(), with the active staff users as recipients."""
    staff = get_user_model().objects.filter(is_staff=True, is_active=True)
    webhooks.notify(topic, data, recipients=list(staff.values_list("pk", flat=True)))
