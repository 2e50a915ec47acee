"""Check what a caller asks to deploy before anything is written."""

import json
import re

from deployments.errors import InvalidRequest
from deployments.models.projects import NAME_PATTERN, canonical_environment

NAME = re.compile(NAME_PATTERN)
REF_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/@+-]{0,254}")
PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_PARAMS = 50
MAX_PARAMS_JSON = 16 * 1024
MAX_IDEMPOTENCY_KEY = 200


def matches(pattern: re.Pattern, value: object) -> bool:
    """Return True if ``value`` is a string that ``pattern`` matches whole.

    The one way names, refs and slugs are checked: ``re.fullmatch``, never ``match`` with a
    ``$`` anchor, which also accepts a trailing newline.
    """
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def clean_ref(ref: object) -> str:
    """Return ``ref`` if it is a plausible git ref (branch, tag or sha); raise otherwise."""
    if not matches(REF_PATTERN, ref) or ".." in ref:
        raise InvalidRequest(
            "ref must be a branch, tag or commit: letters, digits and ._/@+- "
            "(not starting with '-' or '.', no '..', at most 255 characters)",
            field="ref",
        )
    return ref


def clean_environment(environment: object) -> str:
    """Return ``environment`` in its canonical (lower-case) form if valid; raise otherwise.

    The whole string must be a name (no surrounding space is stripped, as for every name);
    letters are then folded to lower case, so every spelling names one environment.
    """
    if not matches(NAME, environment):
        raise InvalidRequest(
            "environment must be 1-64 letters, digits, '.', '_' or '-'", field="environment"
        )
    return canonical_environment(environment)


def clean_params(params: object) -> dict:
    """Return ``params`` if it is a small flat mapping of names to scalars; raise otherwise."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidRequest("params must be an object", field="params")
    if len(params) > MAX_PARAMS:
        raise InvalidRequest(f"params may hold at most {MAX_PARAMS} entries", field="params")
    for name, value in params.items():
        if not matches(PARAM_NAME, name):
            raise InvalidRequest(
                f"param name {name!r} must match {PARAM_NAME.pattern}", field=f"params.{name}"
            )
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidRequest(
                "param values must be strings, numbers, booleans or null", field=f"params.{name}"
            )
    if len(json.dumps(params)) > MAX_PARAMS_JSON:
        raise InvalidRequest(f"params must stay under {MAX_PARAMS_JSON} bytes", field="params")
    return dict(params)


def clean_idempotency_key(key: object) -> str | None:
    """Return the key (None when absent) if it is a non-empty string of sane length."""
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidRequest(
            f"idempotency key must be 1-{MAX_IDEMPOTENCY_KEY} characters",
            field="idempotency_key",
        )
    return key
