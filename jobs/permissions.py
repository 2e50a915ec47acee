"""Which permission each operator action needs, in one table, checked by one helper.

Admin actions, buttons and JSON views ask ``allowed(user, action)``; the table maps an
action to a Django permission. Today each maps to the model's standard ``change``
permission; finer custom permissions replace the right-hand side here and nowhere else.
"""

PERMISSIONS: dict[str, str] = {
    "job.retry": "jobs.change_job",
    "job.cancel": "jobs.change_job",
    "deployment.retry": "deployments.change_deployment",
    "deployment.cancel": "deployments.change_deployment",
    "delivery.replay": "webhooks.change_delivery",
    "endpoint.operate": "webhooks.change_endpoint",
    "metrics.view": "jobs.view_job",
}


def permission_for(action: str) -> str:
    return PERMISSIONS[action]


def allowed(user, action: str) -> bool:
    """Whether ``user`` may perform ``action`` (a key of PERMISSIONS)."""
    return bool(user and user.is_active and user.has_perm(PERMISSIONS[action]))
