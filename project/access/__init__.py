"""Who may do what: API tokens and their ``Idempotency-Key`` records, and the console's
permission table. Neutral ground: the job engine, deployments and webhooks all use it, and
it knows none of their internals but the names of their permissions."""
