"""How the console shows a moment: one format, the operator's time zone, UTC on hover.

Every time on a console page (jobs, deployments, deliveries, the dashboard) goes through
``moment`` (or the ``|moment`` template filter of ``console_time``): 24 h with seconds,
``2026-12-03 14:05:09``, in the active time zone (Django's ``TIME_ZONE`` unless a view
activated another), inside ``<time datetime="…Z" title="… UTC">`` so that hovering shows
the same moment in UTC. ``plain`` is the text alone, for places that cannot hold markup.
``api_text`` is how the REST API writes a moment.
"""

from datetime import UTC, datetime, tzinfo

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.html import format_html

FORMAT = "%Y-%m-%d %H:%M:%S"
EMPTY = "—"


def plain(when: datetime | None, zone: tzinfo | None = None, *, empty: str = EMPTY) -> str:
    """Return ``when`` as text in ``zone`` (default: the active time zone), or ``empty``."""
    if when is None:
        return empty
    if timezone.is_aware(when):
        when = when.astimezone(zone or timezone.get_current_timezone())
    return when.strftime(FORMAT)


def utc(when: datetime) -> datetime:
    """Return ``when`` in UTC (a naive time is taken as UTC, as the database stores it)."""
    return when.astimezone(UTC) if timezone.is_aware(when) else when.replace(tzinfo=UTC)


def moment(when: datetime | None, zone: tzinfo | None = None, *, empty: str = EMPTY) -> str:
    """Return ``when`` as ``<time>`` HTML: local text, UTC in its title; ``empty`` if None."""
    if when is None:
        return empty
    at = utc(when)
    return format_html(
        '<time datetime="{}" title="{} UTC">{}</time>',
        at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        at.strftime(FORMAT),
        plain(when, zone),
    )


def api_text(when: datetime) -> str:
    """``when`` as the REST API writes every moment (its JSON encoder's): UTC, to the
    millisecond, with ``Z`` — for a moment put in an error's details by hand."""
    return DjangoJSONEncoder().default(utc(when))
