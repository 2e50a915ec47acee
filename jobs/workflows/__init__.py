"""Workflows: chains, groups, chords/batches and graphs of jobs that survive any crash.

Build one and ``.enqueue()`` it in the caller's transaction::

    from jobs import workflows

    workflows.chain(("app.fetch", {"url": u}), ("app.parse", {}), ("app.store", {})).enqueue()
    workflows.chord([("app.resize", {"n": n}) for n in range(100)], ("app.report", {})).enqueue()

Every node is a Job row (``workflow`` set); a job with dependencies waits in status
``waiting`` and edges (JobDependency) record who waits for whom. The completer, in the
transaction that records a node's end, releases what that end unblocks (jobs.workflows.
release, which explains why a callback fires exactly once). See docs/jobs.md, Workflows.
"""

from jobs.workflows.build import (
    Graph,
    batch,
    chain,
    chord,
    graph,
    group,
)
from jobs.workflows.errors import WorkflowError
from jobs.workflows.inputs import MEMBERS_KEY, PREVIOUS_KEY
from jobs.workflows.release import advance
from jobs.workflows.retry import resume
from jobs.workflows.state import (
    WorkflowNotFound,
    WorkflowStatus,
    counts_of,
    nodes_of,
    status_of,
    workflow_cancel,
)

__all__ = [
    "MEMBERS_KEY",
    "PREVIOUS_KEY",
    "Graph",
    "WorkflowError",
    "WorkflowNotFound",
    "WorkflowStatus",
    "advance",
    "batch",
    "chain",
    "chord",
    "counts_of",
    "graph",
    "group",
    "nodes_of",
    "resume",
    "status_of",
    "workflow_cancel",
]
