from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Deployments"

    def ready(self) -> None:
        # receivers connects the job_dead handler; tasks registers deployments.run everywhere.
        from deployments import conf, deployers, owners, receivers, tasks  # noqa: F401

        conf.validate()
        owners.register()
        deployers.register()
