from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        # tasks registers webhooks.deliver everywhere; receivers listens to job_dead.
        from jobs.signals import job_dead
        from webhooks import conf, owners, receivers, tasks  # noqa: F401

        conf.validate()
        owners.register()
        job_dead.connect(receivers.on_job_dead, dispatch_uid="webhooks.on_job_dead")
