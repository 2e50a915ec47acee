"""Conveyor's announcements: in-app notifications and signed webhook deliveries."""


def notify(topic: str, data: dict, *, recipients=None):
    """Announce ``topic`` with ``data``: see ``webhooks.dispatch.notify``."""
    from webhooks.dispatch import notify as dispatch

    return dispatch(topic, data, recipients=recipients)
