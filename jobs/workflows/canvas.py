"""A Celery canvas of JobTask signatures, turned into the same durable workflow.

Supported, and how each maps:

* ``task.s(key=value)`` / ``task.si(...)`` / ``task.signature(kwargs=...)``: one step whose
  payload is the keyword arguments. ``options`` ``queue`` and ``priority`` (``.set(...)``)
  are the job's. Immutable or not, a step gets its dependencies' outcomes in its payload
  (``"previous"``, ``"members"``): a JobTask's payload is one dict, never positional args.
* ``chain(a, b, …)`` and ``a | b``: a chain.
* ``group(a, b, …)``: a group.
* ``chord(header, body)`` (and a group followed by a step in a chain, which Celery makes a
  chord): a chord whose callback runs once every member ended however it ended.
* Nesting of all of these.

Refused, with a clear error naming the signature: positional arguments (``a.s(1)``: a job's
payload is one dict), ``link``/``link_error`` callbacks (use a chord's ``when`` or
``batch(on_failure=…)``), ``countdown``/``eta`` on a step, ``chunks``/``xmap``/``xstarmap``
and tasks that are not registered.
"""

from celery.canvas import Signature, _chain, _chord, chunks, group, xmap, xstarmap

from jobs.workflows.errors import WorkflowError

ALLOWED_OPTIONS = frozenset({"queue", "priority", "immutable", "subtask_type"})


def is_canvas(value) -> bool:
    return isinstance(value, Signature)


def from_canvas(signature) -> tuple:
    """Describe ``signature`` as a tree jobs.workflows.build turns into pieces.

    ``("step", task, payload, options)``, ``("chain", [trees])``, ``("group", [trees])`` or
    ``("chord", [member trees], callback tree)``; refuse what has no clean mapping.
    """
    mapped = signature.get("subtask_type") in ("xmap", "xstarmap")
    if isinstance(signature, chunks | xmap | xstarmap) or mapped:
        raise WorkflowError(f"{signature!r}: chunks, map and starmap are not supported")
    if isinstance(signature, _chord):
        members = [from_canvas(member) for member in signature.tasks]
        return ("chord", members, from_canvas(signature.body))
    if isinstance(signature, _chain):
        return ("chain", [from_canvas(step) for step in signature.tasks])
    if isinstance(signature, group):
        return ("group", [from_canvas(member) for member in signature.tasks])
    if signature.args:
        raise WorkflowError(
            f"{signature!r}: positional arguments are not supported; a job's payload is one "
            "dict, so pass keyword arguments (task.s(key=value))"
        )
    options = dict(signature.options or {})
    for name in ("link", "link_error"):
        if options.get(name):
            raise WorkflowError(
                f"{signature!r}: {name} callbacks are not supported; use chord() or batch()"
            )
        options.pop(name, None)
    unknown = set(options) - ALLOWED_OPTIONS
    if unknown:
        raise WorkflowError(f"{signature!r}: option(s) {sorted(unknown)} are not supported")
    kept = {name: options[name] for name in ("queue", "priority") if options.get(name) is not None}
    return ("step", signature.task, dict(signature.kwargs or {}), kept)
