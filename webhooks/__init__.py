"""Conveyor's announcements: in-app notifications and signed webhook deliveries."""


def notify(topic: str, data: dict, *, recipients=None) -> None:
    """Announce ``topic`` with ``data``: see ``webhooks.dispatch.notify``."""
    from webhooks.dispatch import notify as dispatch

    dispatch(topic, data, recipients=recipients)
