from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # deadletter, shutdown, heartbeat and queues connect Celery signal handlers; tasks registers
        # the tasks.
        from jobs import conf, deadletter, heartbeat, queues, shutdown, tasks  # noqa: F401

        conf.validate()
