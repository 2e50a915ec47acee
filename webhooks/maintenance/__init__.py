"""The webhooks app's maintenance services, run by celery-beat (see webhooks.tasks)."""
