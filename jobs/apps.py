from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # deadletter and heartbeat connect Celery signal handlers; tasks registers the tasks.
        from jobs import conf, deadletter, heartbeat, tasks  # noqa: F401

        conf.validate()
