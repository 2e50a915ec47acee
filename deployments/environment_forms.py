"""The console's form for an environment's rules: fields and rows, never raw JSON.

``RulesForm`` edits one ``Environment`` row: approvers are picked from the active users and
the groups (plus any name the row already lists, so a name from a projects file is kept),
refs are typed as a list, and ``FreezeFormSet`` holds one row per freeze window. Every
value is validated as projects-as-code validates it (``deployments.freeze.parse_window`` for
windows), so the stored format, and the API that shows it, stay the same.
"""

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError

from deployments.errors import InvalidRequest
from deployments.freeze import parse_window
from deployments.models import Environment, Project
from deployments.models.environments import MAX_REQUIRED_APPROVALS, validate_ref_patterns
from deployments.projects_as_code.environments import MAX_WAIT_TIMER, MAX_WINDOWS
from deployments.validation import clean_environment

# At most this many users and groups are offered (a bigger directory needs a search box).
MAX_CHOICES = 500


def _names(found, stored: list[str]) -> list[tuple[str, str]]:
    names = sorted(set(found[:MAX_CHOICES]) | set(stored or []))
    return [(name, name) for name in names]


class RulesForm(forms.ModelForm):
    """Who approves, how many, how long to wait, which refs; freeze windows come apart."""

    approver_users = forms.MultipleChoiceField(
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 8}),
        help_text="users who may approve (none picked: anyone with the approve permission)",
    )
    approver_groups = forms.MultipleChoiceField(
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 8}),
        help_text="groups whose members may approve",
    )
    required_approvals = forms.IntegerField(
        min_value=0,
        max_value=MAX_REQUIRED_APPROVALS,
        help_text=f"distinct approvals a deployment needs (1-{MAX_REQUIRED_APPROVALS} when "
        "protected)",
    )
    wait_timer = forms.IntegerField(
        min_value=0,
        max_value=MAX_WAIT_TIMER,
        help_text="seconds after creation before a deployment may start",
    )
    refs = forms.CharField(
        required=False,
        help_text="refs that may deploy here, separated by spaces or commas, such as "
        "main release/* (empty: any ref)",
    )

    class Meta:
        model = Environment
        fields = (
            "protected",
            "required_approvals",
            "approver_users",
            "approver_groups",
            "allow_self_approval",
            "wait_timer",
            "refs",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        rules = self.instance
        users = get_user_model().objects.filter(is_active=True).order_by("username")
        self.fields["approver_users"].choices = _names(
            list(users.values_list("username", flat=True)), rules.approver_users
        )
        self.fields["approver_groups"].choices = _names(
            list(Group.objects.order_by("name").values_list("name", flat=True)),
            rules.approver_groups,
        )
        if not self.is_bound:
            self.initial["refs"] = " ".join(rules.refs or [])

    def clean_refs(self) -> list[str]:
        patterns = self.cleaned_data["refs"].replace(",", " ").split()
        try:
            validate_ref_patterns(patterns)
        except ValidationError as exc:
            raise ValidationError(exc.messages) from None
        return patterns

    def clean(self):
        data = super().clean()
        required = data.get("required_approvals")
        if data.get("protected") and required is not None and required < 1:
            self.add_error("required_approvals", "a protected environment needs at least 1")
        if not data.get("protected") and required:
            self.add_error("required_approvals", "only a protected environment needs approvals")
        data["approver_users"] = sorted(data.get("approver_users") or [])
        data["approver_groups"] = sorted(data.get("approver_groups") or [])
        return data


def _text(size: int) -> forms.TextInput:
    return forms.TextInput(attrs={"size": size, "class": "freeze-input"})


class DeclareForm(forms.Form):
    """Name an environment to give rules to before anything is deployed there."""

    project = forms.ModelChoiceField(queryset=Project.objects.order_by("slug"))
    name = forms.CharField(max_length=64, help_text="letters, digits, '.', '_' or '-'")

    def clean(self):
        data = super().clean()
        project, name = data.get("project"), data.get("name")
        if project is None or name is None:
            return data
        try:
            data["name"] = clean_environment(name)
        except InvalidRequest as exc:
            self.add_error("name", str(exc))
            return data
        if Environment.objects.filter(project=project, name=data["name"]).exists():
            self.add_error("name", f"{project.slug} already has rules for {data['name']!r}")
        return data


class FreezeWindowForm(forms.Form):
    """One freeze window: a cron expression and a duration, or a start and an end."""

    name = forms.CharField(max_length=100, widget=_text(10))
    cron = forms.CharField(required=False, max_length=100, widget=_text(10))
    duration = forms.CharField(required=False, max_length=20, widget=_text(5))
    start = forms.CharField(required=False, max_length=30, widget=_text(14))
    end = forms.CharField(required=False, max_length=30, widget=_text(14))
    timezone = forms.CharField(required=False, max_length=64, initial="UTC", widget=_text(11))

    WINDOW_FIELDS = ("name", "cron", "duration", "start", "end")

    def has_changed(self) -> bool:
        """A row is kept when any of its window fields is filled (the time zone alone is not)."""
        return any(
            str(self.data.get(self.add_prefix(name), "")).strip() for name in self.WINDOW_FIELDS
        )

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        raw = {key: value for key, value in data.items() if value not in ("", None)}
        raw.pop("DELETE", None)
        problems: list[str] = []
        window = parse_window(raw, "window", problems)
        for problem in problems:
            self.add_error(None, problem.removeprefix("window").lstrip(".:").strip())
        data["window"] = window
        return data


class BaseFreezeFormSet(forms.BaseFormSet):
    def windows(self) -> list[dict]:
        """Return the stored form of every row kept (valid formset only)."""
        return [
            form.cleaned_data["window"]
            for form in self.forms
            if form.has_changed() and not self._should_delete_form(form)
        ]


FreezeFormSet = forms.formset_factory(
    FreezeWindowForm,
    formset=BaseFreezeFormSet,
    extra=2,
    can_delete=True,
    max_num=MAX_WINDOWS,
    validate_max=True,
)


def window_rows(windows: list[dict]) -> list[dict]:
    """Return the stored windows as the rows' initial values."""
    rows = []
    for window in windows or []:
        row = {"name": window.get("name", ""), "timezone": window.get("timezone", "UTC")}
        if "cron" in window:
            row.update(cron=window["cron"], duration=_duration(window.get("duration", 0)))
        else:
            row.update(start=_local(window.get("start")), end=_local(window.get("end")))
        rows.append(row)
    return rows


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return str(seconds)


def _local(value: str | None) -> str:
    return (value or "").replace("T", " ").removesuffix(":00") if value else ""
