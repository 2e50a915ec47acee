"""The base of every admin Conveyor registers: filters only as declared, secrets never.

Django's stock ``lookup_allowed`` accepts a query-string filter on any local field, so a
view-only user could ask ``?secret__startswith=whsec_t8`` and read the answer in the count.
``ConveyorAdminMixin`` accepts only what the admin declares:

* the lookups the filters of ``list_filter`` and ``date_hierarchy`` send (``status__exact``,
  ``project__id__exact``, ``created_at__gte``, ...), a SimpleListFilter's ``parameter_name``;
* the lookups listed in ``extra_lookups`` (links the console itself makes, e.g. the
  dashboard's "dead in the last hour");

never facet counts (``?_facets=1`` counts every choice over the whole table), and never a
lookup, search field or filter that reaches a secret field
(``project.secret_fields``), even through a relation. An action without
``allowed_permissions`` is not offered (third-party actions declare none: they would run
for any staff user who can see the list).

Every ModelAdmin on the site uses it; tests/security/test_admin_lookups.py walks the
registry to make sure, including admins added later.
"""

from django.contrib import admin
from django.contrib.admin.filters import ListFilter, SimpleListFilter
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import url_params_from_lookup_dict
from django.core.exceptions import FieldDoesNotExist
from django.db import DataError, transaction
from django.db.models import DateTimeField
from django.db.models.constants import LOOKUP_SEP

from project import times
from project.secret_fields import lookup_reaches_secret

# What Django's own list filters put in the query string after a field path.
FILTER_LOOKUPS = frozenset({"exact", "isnull", "in", "gte", "gt", "lte", "lt", "isempty"})
DATE_HIERARCHY_LOOKUPS = frozenset({"year", "month", "day", "gte", "lt"})


def _filter_suffix_allowed(model, path: str, suffix: str) -> bool:
    """Whether ``suffix`` (what follows a declared field path) is what a list filter sends.

    A plain field's filter sends ``<path>``, ``<path>__exact``, ``<path>__isnull``, ...; a
    relation's sends ``<path>__<its primary key>__exact``, as RelatedFieldListFilter does.
    """
    parts = suffix.split(LOOKUP_SEP) if suffix else ["exact"]
    if len(parts) == 1:
        return parts[0] in FILTER_LOOKUPS
    if len(parts) != 2 or parts[1] not in FILTER_LOOKUPS:
        return False
    try:
        field = get_fields_from_path(model, path)[-1]
    except (FieldDoesNotExist, NotRelationField):
        return False
    related = field.related_model if field.is_relation else None
    return related is not None and parts[0] in ("pk", related._meta.pk.name)


class ConveyorChangeList(ChangeList):
    """A ChangeList that answers a date no date can hold as a bad filter, not a 500."""

    def get_filters(self, request):
        # Django builds the date hierarchy's bounds from the query string unguarded:
        # ?created_at__year=99999999999 overflows, year 9999 has no following year.
        try:
            return super().get_filters(request)
        except (ValueError, OverflowError) as exc:
            raise IncorrectLookupParameters(exc) from exc

    def get_results(self, request):
        # A filter value Python accepts but the database refuses (a datetime whose offset
        # is past PostgreSQL's ±15:59) fails only when the page is read: a bad filter too.
        try:
            with transaction.atomic(using=self.queryset.db):
                return super().get_results(request)
        except DataError as exc:
            raise IncorrectLookupParameters(exc) from exc


class ConveyorAdminMixin:
    """Restrict an admin's lookups, searches and actions to what it declares (see module)."""

    #: Lookups allowed beyond the list filters' own: links the console builds.
    extra_lookups: tuple[str, ...] = ()
    # Django lets any viewer add ?_facets=1: a count per filter choice over every matching
    # row on each page view, which on the job, delivery and log tables is a full scan.
    show_facets = admin.ShowFacets.NEVER

    def _declared_filter_paths(self, request) -> tuple[set[str], set[str]]:
        paths, parameters = set(), set()
        for item in self.get_list_filter(request):
            if isinstance(item, type) and issubclass(item, SimpleListFilter):
                parameters.add(item.parameter_name)
            elif isinstance(item, type) and issubclass(item, ListFilter):
                continue  # a custom ListFilter reads its own parameters, none of them fields
            elif isinstance(item, (list, tuple)):
                paths.add(item[0])
            else:
                paths.add(item)
        return paths, parameters

    def lookup_allowed(self, lookup, value, request) -> bool:
        """Allow only declared filter lookups, and none that reaches a secret field."""
        if lookup_reaches_secret(self.model, lookup):
            return False
        if lookup in self.extra_lookups or self._limit_choices_lookup(lookup, value):
            return True
        paths, parameters = self._declared_filter_paths(request)
        if lookup in parameters:
            return True
        if self.date_hierarchy and lookup.startswith(self.date_hierarchy + LOOKUP_SEP):
            suffix = lookup.removeprefix(self.date_hierarchy + LOOKUP_SEP)
            if suffix in DATE_HIERARCHY_LOOKUPS:
                return True
        for path in paths:
            if lookup == path or lookup.startswith(path + LOOKUP_SEP):
                suffix = lookup.removeprefix(path).removeprefix(LOOKUP_SEP)
                if _filter_suffix_allowed(self.model, path, suffix):
                    return True
        return False

    def _limit_choices_lookup(self, lookup, value) -> bool:
        # The raw-id popup of a ForeignKey with limit_choices_to filters by it, as Django allows.
        for fk_lookup in self.model._meta.related_fkey_lookups:
            if callable(fk_lookup):
                fk_lookup = fk_lookup()
            if (lookup, value) in url_params_from_lookup_dict(fk_lookup).items():
                return True
        return False

    def get_changelist(self, request, **kwargs):
        """Return the ChangeList that refuses impossible dates (subclass it to extend)."""
        return ConveyorChangeList

    def get_search_fields(self, request):
        """Return the declared search fields minus any that reaches a secret field."""
        return [
            field
            for field in super().get_search_fields(request)
            if not lookup_reaches_secret(self.model, str(field))
        ]

    def get_actions(self, request):
        """Return the permitted actions, leaving out any that declares no permission."""
        return {
            name: action
            for name, action in super().get_actions(request).items()
            if getattr(action[0], "allowed_permissions", None)
        }


class ConveyorModelAdmin(ConveyorAdminMixin, admin.ModelAdmin):
    """The ModelAdmin every Conveyor model is registered with."""

    #: Show the list's date-time columns as every console page does (project.times): one
    #: format, the operator's time zone, UTC on hover. An admin rendering its own rows
    #: (jobs.changelist) turns it off and calls project.times itself.
    moment_columns = True

    def get_list_display(self, request):
        """Return ``list_display`` with each date-time field shown by ``project.times``."""
        shown = super().get_list_display(request)
        if not self.moment_columns:
            return shown
        return [self._moment_column(name) if isinstance(name, str) else name for name in shown]

    def _moment_column(self, name: str) -> str:
        try:
            field = self.model._meta.get_field(name)
        except FieldDoesNotExist:
            return name
        if not isinstance(field, DateTimeField):
            return name
        column = f"{name}_moment"
        if not hasattr(self, column):

            def show(obj, attname=field.attname):
                return times.moment(getattr(obj, attname), empty=self.get_empty_value_display())

            show.short_description = field.verbose_name
            show.admin_order_field = name
            setattr(self, column, show)
        return column


class ReadOnlyModelAdmin(ConveyorModelAdmin):
    """A page of rows nobody adds, edits or deletes here (state, schedules, workflows):
    what changes them are its actions, each with its own permission."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
