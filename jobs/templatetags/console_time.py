"""``{{ when|moment }}``: a time as every console page shows it (project.times)."""

from datetime import datetime

from django import template

from project import times

register = template.Library()


@register.filter
def moment(when, empty: str = times.EMPTY):
    """Render a datetime in the operator's time zone, to the second, with UTC on hover."""
    if when is None or isinstance(when, datetime):
        return times.moment(when, empty=empty)
    return when  # already text (a JSON view's string): shown as it is
