"""Who may do what: API tokens and their ``Idempotency-Key`` records, and the console's
permission table. Neutral ground beside the job engine: the engine's edges, deployments and
webhooks use it; it uses only the engine's audit log and maintenance runner, and knows of
the apps only the names of their permissions (``permissions``)."""
