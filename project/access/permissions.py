"""Which permission each operator action needs, in one table, checked by one helper.

Buttons and JSON views ask ``allowed(user, action)``; the table maps an action to the same
custom permission its admin action declares (``@admin.action(permissions=[...])`` with
``project.admin_permissions.permission_check``), so a button is allowed exactly when the
action that does the same thing is. It names every app's permissions, so it is no app's.
"""

PERMISSIONS: dict[str, str] = {
    "job.retry": "jobs.retry_job",
    "job.cancel": "jobs.cancel_job",
    "job.delete": "jobs.delete_job",
    "job.view": "jobs.view_job",
    "workflow.view": "jobs.view_job",
    "workflow.cancel": "jobs.cancel_job",
    "queue.pause": "jobs.pause_queue",
    "task.pause": "jobs.pause_task",
    "schedule.pause": "jobs.pause_schedule",
    "schedule.run": "jobs.run_schedule",
    "deployment.trigger": "deployments.run_deployment",
    "deployment.retry": "deployments.run_deployment",
    "deployment.cancel": "deployments.cancel_deployment",
    "deployment.recover": "deployments.recover_deployment",
    "environment.rollback": "deployments.run_deployment",  # as a deploy-scope token may
    "delivery.view": "webhooks.view_delivery",
    "delivery.replay": "webhooks.replay_delivery",
    "endpoint.view": "webhooks.view_endpoint",
    "endpoint.create": "webhooks.add_endpoint",
    "endpoint.operate": "webhooks.change_endpoint",
    "endpoint.delete": "webhooks.delete_endpoint",
    "endpoint.rotate": "webhooks.rotate_secret",
    "endpoint.test": "webhooks.send_test",
    "endpoint.replay": "webhooks.replay_delivery",
    "environment.lock": "deployments.add_deploylock",
    "environment.unlock_any": "deployments.delete_deploylock",
    "metrics.view": "jobs.view_job",
}


def allowed(user, action: str) -> bool:
    """Whether ``user`` may perform ``action`` (a key of PERMISSIONS)."""
    return bool(user and user.is_active and user.has_perm(PERMISSIONS[action]))
