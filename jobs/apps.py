from django.apps import AppConfig
from django.db.models.signals import post_migrate, pre_delete


def _ensure_accounting_triggers(using: str = "default", **kwargs) -> None:
    """Put back the accounting triggers if a migration dropped them (a SQLite table rebuild)."""
    from django.db import connections

    from jobs.accounting import triggers

    connection = connections[using]
    tables = set(connection.introspection.table_names())
    if {"jobs_job", "jobs_jobcount", "jobs_jobcountdelta"} <= tables:
        triggers.ensure_installed(connection)


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # lost_runs, shutdown, worker_registry and queues connect Celery signal handlers;
        # tasks registers the tasks.
        from jobs import conf, lost_runs, queues, shutdown, tasks, worker_registry  # noqa: F401

        conf.validate()
        post_migrate.connect(
            _ensure_accounting_triggers, sender=self, dispatch_uid="jobs.accounting.triggers"
        )
        from jobs.models import Workflow
        from jobs.workflows.state import refuse_deleting_a_workflow_with_jobs

        pre_delete.connect(
            refuse_deleting_a_workflow_with_jobs,
            sender=Workflow,
            dispatch_uid="jobs.workflow.delete",
        )
        _check_task_declarations()
        _check_schedules()


def _check_task_declarations() -> None:
    """Load every app's tasks and refuse to start on a bad ``unique`` or ``limit``."""
    from django.utils.module_loading import autodiscover_modules

    from jobs import limits, unique
    from jobs.task import JobTask
    from project.celery import app

    # Celery's own loader would set Django up again (populate() is not reentrant here).
    autodiscover_modules("tasks")
    unique.check_declared(app.tasks.values())
    for task in app.tasks.values():
        limit = getattr(task, "limit", None)
        limits.check_declared(task.name, limit, on_job_task=isinstance(task, JobTask))


def _check_schedules() -> None:
    """Refuse to start on a bad schedule (ImproperlyConfigured naming it: one line, exit 2)."""
    from jobs.schedules.spec import declared

    declared()
