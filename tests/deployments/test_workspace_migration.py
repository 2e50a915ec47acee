"""Migration 0013 keeps existing workspace rows and gives them the migrating host's identity."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("deployments", "0012_project_api_tokens_in_access")]
AFTER = [("deployments", "0013_deployer_hosts")]


def test_existing_workspaces_are_kept_on_the_migrating_host(transactional_db, settings):
    settings.CONVEYOR_DEPLOYER_HOST = "build-7"
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(BEFORE)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        project = old.get_model("deployments", "Project").objects.create(slug="web", name="Web")
        workspace = old.get_model("deployments", "Workspace").objects.create(
            project=project, path="/srv/ws/web/repo.git", repo="/srv/git/web"
        )
        old.get_model("deployments", "Worktree").objects.create(
            workspace=workspace, commit_sha="a" * 40, path="/p", last_used_at="2026-01-01T00:00Z"
        )

        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps
        rows = list(new.get_model("deployments", "Workspace").objects.values("host", "path"))
        assert rows == [{"host": "build-7", "path": "/srv/ws/web/repo.git"}]
        assert new.get_model("deployments", "Worktree").objects.count() == 1
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
