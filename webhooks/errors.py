"""Domain errors of the webhooks app; each names the HTTP status an API should answer with."""


class WebhookError(Exception):
    """Base class: a request the webhooks services refuse, with a stable ``code``."""

    code = "invalid"
    http_status = 422


class UnknownTopic(WebhookError, ValueError):
    """A topic that Conveyor does not announce (see ``webhooks.topics.TOPICS``)."""

    code = "unknown_topic"


class UnsafeURL(WebhookError, ValueError):
    """An endpoint URL the SSRF guard refuses (scheme, credentials or address)."""

    code = "unsafe_url"


class InvalidEndpoint(WebhookError, ValueError):
    """Endpoint fields that cannot be saved (too long, malformed)."""


class EndpointNotFound(WebhookError, LookupError):
    code = "not_found"
    http_status = 404


class DeliveryNotFound(WebhookError, LookupError):
    code = "not_found"
    http_status = 404


class DeliveryConflict(WebhookError):
    """A delivery change its current status does not allow (e.g. replaying one in flight)."""

    code = "conflict"
    http_status = 409
