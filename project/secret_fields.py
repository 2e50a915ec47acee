"""Mark the model fields that hold a secret, once, where the model is defined.

A secret field is one whose value must never be learned by anyone the model's own display
does not show it to: signing secrets, project secrets, repository URLs (they may carry a
password), webhook URLs (Slack-style URLs are credentials), password and token hashes. The
admin (``project.admin_base``) refuses every list filter or search that reaches one, even
through a relation (``endpoint__secret__startswith``), because a count that answers "1 or 0"
to a guess leaks the value one character at a time. Any other code that filters on a
caller's say-so (an API filter, a search box) asks ``lookup_reaches_secret`` too::

    @secret_fields("secret", "previous_secret", "url")
    class Endpoint(models.Model): ...

Models of other apps (``auth.User.password``) are marked with ``mark_secret`` at start-up.
"""

from django.core.exceptions import FieldDoesNotExist
from django.db.models import Model
from django.db.models.constants import LOOKUP_SEP

_SECRET: dict[str, frozenset[str]] = {}


def _key(model: type[Model]) -> str:
    return f"{model._meta.app_label}.{model._meta.object_name}".lower()


def mark_secret(model: type[Model], *field_names: str) -> None:
    """Record that ``field_names`` of ``model`` hold secrets."""
    for name in field_names:
        model._meta.get_field(name)  # a typo must fail loudly, not leave a field unguarded
    _SECRET[_key(model)] = _SECRET.get(_key(model), frozenset()) | frozenset(field_names)


def secret_fields(*field_names: str):
    """Return a class decorator marking ``field_names`` of the model as secret."""

    def mark(model: type[Model]) -> type[Model]:
        mark_secret(model, *field_names)
        return model

    return mark


def secrets_of(model: type[Model]) -> frozenset[str]:
    """Return the names of ``model``'s secret fields (inherited from concrete parents too)."""
    names = _SECRET.get(_key(model), frozenset())
    for parent in model._meta.get_parent_list():
        names |= _SECRET.get(_key(parent), frozenset())
    return names


def lookup_reaches_secret(model: type[Model], lookup: str) -> bool:
    """Return True if the ORM lookup ``lookup`` on ``model`` touches a secret field.

    Relations are followed (``endpoint__secret__startswith`` from Delivery reaches
    Endpoint.secret); whatever follows a plain field is a transform or lookup of it
    (``secrets__TOKEN__startswith`` reaches Project.secrets). A search field's prefix
    (``=``, ``^``, ``@``) is ignored.
    """
    current = model
    for part in lookup.lstrip("=^@").split(LOOKUP_SEP):
        if part == "pk":
            part = current._meta.pk.name
        try:
            field = current._meta.get_field(part)
        except FieldDoesNotExist:
            return False
        if part in secrets_of(current) or field.name in secrets_of(current):
            return True
        if not field.is_relation or field.related_model is None:
            return False
        current = field.related_model
    return False
