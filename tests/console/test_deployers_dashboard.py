"""The dashboard shows deployer hosts: live or gone, tags, free disk, workspaces, worktrees."""

from datetime import timedelta

from django.utils import timezone

from deployments.models import Deployer, Workspace, Worktree


def test_the_dashboard_lists_deployer_hosts_live_and_gone(admin_client, make_project, settings):
    settings.CONVEYOR_DEPLOYER_GONE_AFTER = timedelta(minutes=2)
    now = timezone.now()
    project = make_project()
    seen = {"alpha": now - timedelta(seconds=30), "beta": now - timedelta(minutes=3)}
    for host, tags in (("alpha", ["gpu", "linux"]), ("beta", ["linux"])):
        Deployer.objects.create(
            host=host,
            tags=tags,
            free_disk_bytes=5 * 1024**3,
            started_at=now - timedelta(hours=1),
            last_seen_at=seen[host],
        )
    space = Workspace.objects.create(project=project, host="alpha", path="/x", repo="/r")
    Worktree.objects.create(workspace=space, commit_sha="a" * 40, path="/x/a", last_used_at=now)

    part = admin_client.get("/admin/dashboard/data.json").json()["parts"]["dashboard-deployers"]
    rows = part.split("<tr class=")[1:]
    alpha, beta = (next(r for r in rows if f"<th>{h}</th>" in r) for h in ("alpha", "beta"))
    assert alpha.startswith('"alive"') and "gpu, linux" in alpha and "5.0\xa0GB" in alpha
    assert "host=alpha" in alpha and ">1</a>" in alpha and "<td>1</td>" in alpha
    assert beta.startswith('"gone"')  # not seen for longer than the gone-after time
    assert ">0</a>" in beta
    assert admin_client.get("/admin/deployments/deployer/").status_code == 200
    assert "alpha" in admin_client.get("/admin/deployments/workspace/?host=alpha").text
