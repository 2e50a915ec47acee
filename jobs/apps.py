from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # deadletter, shutdown and heartbeat connect Celery signal handlers; tasks registers
        # the tasks.
        from jobs import conf, deadletter, heartbeat, shutdown, tasks  # noqa: F401

        conf.validate()
        _check_unique_rules()


def _check_unique_rules() -> None:
    """Load every app's tasks and refuse to start on a bad ``unique`` declaration."""
    from django.utils.module_loading import autodiscover_modules

    from jobs.unique import check_declared
    from project.celery import app

    # Celery's own loader would set Django up again (populate() is not reentrant here).
    autodiscover_modules("tasks")
    check_declared(app.tasks.values())
