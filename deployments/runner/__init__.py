"""The pipeline runner: what a ``deployments.run`` job does once it has claimed its row."""
