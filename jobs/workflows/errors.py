"""The workflow's error: what cannot be enqueued, named by node."""


class WorkflowError(ValueError):
    """A workflow that cannot be enqueued; the message names the node."""
