from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # deadletter connects the Celery signal handlers; tasks registers the tasks everywhere.
        from jobs import conf, deadletter, tasks  # noqa: F401

        conf.validate()
