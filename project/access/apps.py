from django.apps import AppConfig


class AccessConfig(AppConfig):
    """API tokens, idempotency keys and the permission table (app label ``access``).

    Its models were the job engine's until migration ``access.0001``: their tables keep
    their ``jobs_`` names, and their permissions moved with their content types.
    """

    name = "project.access"
    label = "access"
    verbose_name = "API access"
