"""Signals other apps listen to, so that jobs depends on none of them."""

from django.dispatch import Signal

# Sent inside the transaction that buried the job, with ``job``: webhooks announces
# ``job.dead``, deployments fails the deployment the job was running.
job_dead = Signal()

# Sent inside the transaction that cancelled a waiting job (an operator's cancel through the
# jobs API or admin), with ``job`` and ``actor``: deployments cancels the deployment it ran.
job_cancelled = Signal()
