"""An app's beat hook runs after each beat; one that fails never stops the others."""

from jobs import worker_registry


def test_a_failing_hook_is_logged_and_the_next_hook_still_runs(monkeypatch, caplog):
    seen = []

    def broken(info):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(worker_registry, "_hooks", {})
    worker_registry.on_report(broken, name="tests.broken")
    worker_registry.on_report(lambda info: seen.append(info["name"]), name="tests.seen")
    worker_registry.on_report(lambda info: seen.append("again"), name="tests.seen")  # replaces it

    worker_registry._run_hooks({"name": "w1@host", "queues": ["deployments"]})

    assert seen == ["again"]
    assert [r.hook for r in caplog.records if r.getMessage() == "worker.beat_hook_failed"] == [
        "tests.broken"
    ]
