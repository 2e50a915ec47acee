"""The topics Conveyor announces: the only names notify() and subscriptions accept."""

from webhooks.errors import UnknownTopic

TOPICS: dict[str, str] = {
    "deployment.created": "A deployment was triggered and is waiting to run.",
    "deployment.approval_requested": (
        "A deployment to a protected environment waits for its approvers."
    ),
    "deployment.started": "A deployment started running its steps.",
    "deployment.succeeded": "A deployment finished with every step successful.",
    "deployment.failed": "A deployment failed (a step failed, timed out or its worker was lost).",
    "deployment.cancelled": "A deployment was cancelled.",
    "deployment.unhealthy": (
        "A deployment's health gate found its environment failing after it succeeded."
    ),
    "job.dead": "A background job exhausted its attempts or failed permanently.",
    "workspace.sync_failed": "A git workspace could not be fetched.",
    "worktree.prune_pending": "An idle worktree will be pruned soon.",
    "worktree.pruned": "An idle worktree was pruned.",
}

# Sent only by endpoint_send_test() to the one endpoint being tested; nobody subscribes to it.
TEST_TOPIC = "webhook.test"


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is a known topic, else raise UnknownTopic."""
    if topic not in TOPICS:
        raise UnknownTopic(f"unknown topic {topic!r}; known topics: {', '.join(TOPICS)}")
    return topic


def validate_topics(topics) -> list[str]:
    """Return the known, de-duplicated topics of a subscription, in the documented order."""
    if isinstance(topics, str) or not topics:
        raise UnknownTopic("subscribe to a non-empty list of topics")
    chosen = {validate_topic(str(topic)) for topic in topics}
    return [topic for topic in TOPICS if topic in chosen]
