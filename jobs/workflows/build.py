"""Build a workflow — chain, group, chord/batch or a graph — and enqueue it as rows.

A *step* is ``(task, payload)`` (a task name or a JobTask, a dict), ``(task, payload,
options)`` (options: ``queue``, ``priority``, ``max_attempts``), a task alone (empty
payload), a JobTask signature (``task.s(key=value)``, see jobs.workflows.canvas) or a
django.tasks ``Task`` (its payload ``{"args": [...], "kwargs": {...}}``). Pieces nest: a
chain's step may be a group, a group's member a chain.

``.enqueue()`` validates everything first — an unknown task, a step that is not a task, a
cycle, a unique task, more jobs than ``CONVEYOR_WORKFLOW_MAX_NODES`` — and raises
``WorkflowError`` naming the node, with nothing written. Then, in the caller's transaction:
one Workflow row, the jobs in bulk (those with dependencies ``waiting``, the others
``queued``, published once the transaction commits) and the edges in one statement.
"""

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from celery import Task
from django.db import transaction
from django.utils import timezone

from jobs import conf
from jobs.models import Condition, FailureRule, Job, JobStatus, Workflow
from jobs.publish import publish_on_commit
from jobs.services.base import logger
from jobs.workflows.canvas import from_canvas, is_canvas
from jobs.workflows.errors import WorkflowError
from jobs.workflows.rows import edges, insert_edges, job_row, started_by_key

S = JobStatus
NAME_LENGTH = Workflow._meta.get_field("name").max_length
DJANGO_TASK = "jobs.django_task"  # jobs.backends: the task that runs a django.tasks function


# Slotted steps and nodes, no lists of their own where they wait for nothing: a 10,000-member
# group is built of as few objects the garbage collector tracks as can be, so enqueueing it
# sets the collector off no more often than ``enqueue_many`` of as many jobs does (a full
# collection of a web process's objects takes tens of milliseconds). An empty dict is not
# tracked.


@dataclass(slots=True)
class Step:
    """One job of a workflow: a task, its payload and its enqueue options."""

    task: object
    payload: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    def place(self, graph: "Graph", after: list["Node"], condition) -> list["Node"]:
        return [graph.add(self, depends_on=after, condition=condition)]


@dataclass(eq=False, slots=True)
class Node:
    """A step placed in a graph, with the nodes (or keys) it waits for."""

    step: Step
    key: str
    depends_on: tuple = ()
    condition: str | None = None  # None: the workflow's failure rule decides


class Piece:
    """A chain, group or chord: placed after some nodes, it answers its last nodes."""

    def place(self, graph: "Graph", after: list[Node], condition) -> list[Node]:
        raise NotImplementedError

    def enqueue(
        self, *, name: str = "", on_failure: str = FailureRule.FAIL, started_by=None
    ) -> Workflow:
        """Write this piece as a workflow in the caller's transaction; return the Workflow.

        ``started_by``: what started it — a model instance (a Deployment) or ``"kind:id"``.
        """
        graph = Graph(name=name, on_failure=on_failure, started_by=started_by)
        self.place(graph, [], None)
        return graph.enqueue()


class Chain(Piece):
    def __init__(self, steps: Sequence) -> None:
        self.steps = [as_piece(step) for step in steps]

    def place(self, graph, after, condition):
        for position, step in enumerate(self.steps):
            after = step.place(graph, after, condition if position == 0 else None)
        return after


class Group(Piece):
    def __init__(self, steps: Sequence) -> None:
        self.steps = [as_piece(step) for step in steps]

    def place(self, graph, after, condition):
        ends: list[Node] = []
        for step in self.steps:
            ends += step.place(graph, after, condition)
        return ends


class Batch(Piece):
    """Members in parallel, then callbacks, each run once when its condition is met."""

    def __init__(self, members, callbacks: list[tuple[object, str]]) -> None:
        self.members = members if isinstance(members, Piece) else Group(list(members))
        self.callbacks = [(as_piece(callback), when) for callback, when in callbacks]
        for _, when in self.callbacks:
            if when not in Condition.values:
                raise WorkflowError(f"a callback runs on {sorted(Condition.values)}, not {when!r}")

    def place(self, graph, after, condition):
        ends = self.members.place(graph, after, condition)
        if not self.callbacks:
            return ends
        last: list[Node] = []
        for callback, when in self.callbacks:
            last += callback.place(graph, ends, when)
        return last


def chain(*steps) -> Chain:
    """Each step runs after the one before, its payload's ``"previous"`` that one's result."""
    return Chain(steps)


def group(*steps) -> Group:
    """The steps run in parallel."""
    return Group(steps)


def chord(members, callback, *, when: str = Condition.COMPLETE) -> Batch:
    """``members`` in parallel, then ``callback`` once every one has ended (``when``).

    ``when``: ``complete`` (however they ended: the default), ``success`` (only if all
    succeeded, else the callback is cancelled) or ``failure`` (only if any did not).
    The callback's payload gets every member's outcome under ``"members"``.
    """
    return Batch(_members(members), [(callback, when)])


def batch(members, *, on_complete=None, on_success=None, on_failure=None) -> Batch:
    """``members`` in parallel, with a callback for each of the conditions given."""
    callbacks = [
        (callback, when)
        for callback, when in (
            (on_complete, Condition.COMPLETE),
            (on_success, Condition.SUCCESS),
            (on_failure, Condition.FAILURE),
        )
        if callback is not None
    ]
    return Batch(_members(members), callbacks)


def _members(members) -> Piece:
    if isinstance(members, Piece):
        return members
    if is_canvas(members):
        return as_piece(members)
    return Group(list(members))


class Graph:
    """A general workflow: ``add`` steps with ``depends_on`` (nodes or keys), then enqueue."""

    def __init__(
        self, *, name: str = "", on_failure: str = FailureRule.FAIL, started_by=None
    ) -> None:
        if on_failure not in FailureRule.values:
            raise WorkflowError(
                f"on_failure is one of {sorted(FailureRule.values)}, not {on_failure!r}"
            )
        if not isinstance(name, str) or len(name) > NAME_LENGTH or "\x00" in name:
            raise WorkflowError(f"name: text of up to {NAME_LENGTH} characters, not {name!r:.80}")
        self.name = name
        self.on_failure = on_failure
        self.started_by = started_by_key(started_by)
        self.nodes: list[Node] = []
        self._keys: dict[str, Node] = {}

    def add(
        self,
        step,
        *,
        depends_on: Iterable = (),
        key: str | None = None,
        condition: str | None = None,
    ) -> Node:
        """Add ``step``, waiting for ``depends_on`` (nodes or keys, maybe added later)."""
        piece = as_piece(step)
        if not isinstance(piece, Step):
            raise WorkflowError(
                f"node {key or len(self.nodes)}: add() takes one step, not a {piece}"
            )
        key = key if key is not None else f"#{len(self.nodes)}"
        if key in self._keys:
            raise WorkflowError(f"node {key!r}: the key is used twice")
        if condition is not None and condition not in Condition.values:
            raise WorkflowError(
                f"node {key!r}: condition {condition!r} is not one of {sorted(Condition.values)}"
            )
        if isinstance(depends_on, str | Node):  # one key or node, not its characters
            depends_on = (depends_on,)
        node = Node(step=piece, key=key, depends_on=tuple(depends_on), condition=condition)
        self.nodes.append(node)
        self._keys[key] = node
        return node

    def enqueue(self) -> Workflow:
        """Validate, then write the workflow in the caller's transaction (one of its own
        outside one: its rows, jobs and edges all appear together or not at all); return it."""
        with transaction.atomic():
            return self._write()

    def _write(self) -> Workflow:
        order, deps = self._resolve()
        now = timezone.now()
        defaults: dict = {}  # a task's defaults, looked up once per enqueue
        jobs = [job_row(node, bool(deps[node]), now, defaults) for node in order]
        workflow = Workflow.objects.create(
            name=self.name,
            failure_rule=self.on_failure,
            node_count=len(jobs),
            created_at=now,
            started_by=self.started_by,
        )
        for job in jobs:
            job.workflow_id = workflow.pk
        Job.objects.bulk_create(jobs, batch_size=1000)
        ids = {node: job.pk for node, job in zip(order, jobs, strict=True)}
        default = Condition.SUCCESS if self.on_failure == FailureRule.FAIL else Condition.COMPLETE
        written = edges(order, deps, ids, default)
        insert_edges(workflow.pk, written)
        roots = [job for job in jobs if job.status == S.QUEUED]
        logger.info(
            "workflow.enqueued",
            extra={"workflow": workflow.pk, "jobs": len(jobs), "edges": len(written)},
        )
        publish_on_commit(roots)
        workflow.enqueued_jobs = jobs
        return workflow

    def _resolve(self) -> tuple[list[Node], dict[Node, Sequence[Node]]]:
        """Resolve keys; refuse a cycle or a workflow too large; return a topological order."""
        limit = conf.get().workflow_max_nodes
        if len(self.nodes) > limit:
            raise WorkflowError(
                f"the workflow has {len(self.nodes)} jobs, more than CONVEYOR_WORKFLOW_MAX_NODES "
                f"({limit}); node {self.nodes[limit].key!r} is one too many"
            )
        if not self.nodes:
            raise WorkflowError("the workflow has no jobs")
        deps: dict[Node, Sequence[Node]] = {}
        for node in self.nodes:
            if not node.depends_on:
                deps[node] = ()
                continue
            found: list[Node] = []
            seen: set[Node] = set()  # a callback may wait for 10,000 members: no list scans
            for ref in node.depends_on:
                dependency = ref if isinstance(ref, Node) else self._keys.get(ref)
                if dependency is None or self._keys.get(dependency.key) is not dependency:
                    named = ref.key if isinstance(ref, Node) else ref
                    raise WorkflowError(
                        f"node {node.key!r}: depends on {named!r}, not in this workflow"
                    )
                if dependency is node:
                    raise WorkflowError(f"node {node.key!r}: depends on itself (a cycle)")
                if dependency not in seen:
                    seen.add(dependency)
                    found.append(dependency)
            deps[node] = found
        return _topological(self.nodes, deps), deps


def graph(*, name: str = "", on_failure: str = FailureRule.FAIL, started_by=None) -> Graph:
    """A general workflow to ``add`` steps to (see Graph)."""
    return Graph(name=name, on_failure=on_failure, started_by=started_by)


def _topological(nodes: list[Node], deps: dict[Node, Sequence[Node]]) -> list[Node]:
    """Kahn's order (dependencies first, else as added); a cycle is refused by name."""
    waiting = {node: len(deps[node]) for node in nodes}
    dependants: dict[Node, list[Node]] = {node: [] for node in nodes}
    for node in nodes:
        for dependency in deps[node]:
            dependants[dependency].append(node)
    ready = deque(node for node in nodes if waiting[node] == 0)
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for dependant in dependants[node]:
            waiting[dependant] -= 1
            if waiting[dependant] == 0:
                ready.append(dependant)
    if len(order) < len(nodes):
        stuck = [node.key for node in nodes if waiting[node] > 0]
        raise WorkflowError(
            f"the workflow has a cycle through node(s) {', '.join(map(repr, stuck[:10]))}"
        )
    return order


def as_piece(step) -> Piece | Step:
    """Turn what a user passes as a step into a Step or a Piece; refuse what is not a task."""
    if isinstance(step, Piece | Step):
        return step
    if is_canvas(step):
        return _from_tree(from_canvas(step))
    if isinstance(step, tuple | list) and step and len(step) in (2, 3):
        task, payload, *rest = step
        options = rest[0] if rest else {}
        if not isinstance(options, dict):
            raise WorkflowError(f"step {step!r}: its options are a dict")
        return _step(task, payload, options)
    if isinstance(step, str | Task) or _is_django_task(step):
        return _step(step, {}, {})
    raise WorkflowError(
        f"step {step!r} is not a task (a (task, payload) pair, a task or a signature)"
    )


def _from_tree(tree: tuple) -> Piece | Step:
    """The pieces a canvas stands for (see jobs.workflows.canvas.from_canvas)."""
    kind, *rest = tree
    if kind == "step":
        task, payload, options = rest
        return Step(task=task, payload=payload, options=options)
    if kind == "chain":
        return Chain([_from_tree(step) for step in rest[0]])
    if kind == "group":
        return Group([_from_tree(step) for step in rest[0]])
    members, callback = rest
    return Batch(Group([_from_tree(m) for m in members]), [(_from_tree(callback), "complete")])


def _step(task, payload, options) -> Step:
    if _is_django_task(task):
        return _django_step(task, payload, options)
    if not isinstance(task, str | Task):
        raise WorkflowError(f"step {task!r} is not a task")
    return Step(task=task, payload=payload if payload is not None else {}, options=dict(options))


def _is_django_task(value) -> bool:
    from django.tasks import Task as DjangoTask

    return isinstance(value, DjangoTask)


def _django_step(task, payload, options) -> Step:
    """A django.tasks function as a step: the payload jobs.backends writes for it."""
    from jobs.backends import normalize_json

    payload = payload or {}
    return Step(
        task=DJANGO_TASK,
        payload={
            "path": task.module_path,
            "args": normalize_json(payload.get("args", [])),
            "kwargs": normalize_json(payload.get("kwargs", {})),
            "takes_context": task.takes_context,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": None,
            "backend": task.backend,
        },
        options={"queue": task.queue_name, "priority": task.priority, **options},
    )
