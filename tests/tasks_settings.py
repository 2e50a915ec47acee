"""Settings for a worker whose ``TASKS`` declares a queue of its own (``emails``)."""

from project.settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "jobs.backends.ConveyorBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"max_attempts": 1},
    }
}
