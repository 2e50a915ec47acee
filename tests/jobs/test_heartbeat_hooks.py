"""An app's beat hook runs after each beat; one that fails never stops the others."""

from jobs import heartbeat


def test_a_failing_hook_is_logged_and_the_next_hook_still_runs(monkeypatch, caplog):
    seen = []

    def broken(info):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(heartbeat, "_hooks", {})
    heartbeat.on_beat(broken, name="tests.broken")
    heartbeat.on_beat(lambda info: seen.append(info["name"]), name="tests.seen")
    heartbeat.on_beat(lambda info: seen.append("again"), name="tests.seen")  # replaces it

    heartbeat._run_hooks({"name": "w1@host", "queues": ["deployments"]})

    assert seen == ["again"]
    assert [r.hook for r in caplog.records if r.getMessage() == "worker.beat_hook_failed"] == [
        "tests.broken"
    ]
