"""DORA metrics from a hand-made history, checked against values worked out by hand."""

from datetime import UTC, datetime, timedelta

import pytest

from deployments.dora import dora_metrics
from deployments.models import Deployment
from tests.api.conftest import assert_error

T = datetime(2026, 6, 30, tzinfo=UTC)
H = timedelta(hours=1)
D = timedelta(days=1)


def row(project, status, finished, *, committed=None, environment="production", **fields):
    """Write one finished deployment as the runner would have left it."""
    return Deployment.objects.create(
        project=project,
        environment=environment,
        ref="main",
        commit_sha=f"{finished.timestamp():.0f}",
        pipeline_name="default",
        steps=[],
        timeout=60,
        status=status,
        created_at=finished - H / 2,
        updated_at=finished,
        started_at=finished - H / 4,
        finished_at=finished,
        committed_at=committed,
        **fields,
    )


def history(project, until: datetime) -> None:
    """The history whose metrics are worked out by hand in the tests below."""
    row(project, "success", until - 40 * D, committed=until - 41 * D)  # before the window
    row(project, "success", until - 29 * D - 12 * H, committed=until - 29 * D - 14 * H)  # 2h
    row(project, "failed", until - 27 * D - 15 * H, committed=until - 27 * D - 16 * H)
    d3 = row(project, "success", until - 27 * D - 13.5 * H, committed=until - 27 * D - 16 * H)
    d4 = row(project, "success", until - 20 * D - 6 * H, committed=until - 20 * D - 12 * H)  # 6h
    r1 = row(project, "success", until - 20 * D - 3.5 * H, committed=d3.committed_at)
    Deployment.objects.filter(pk=r1.pk).update(
        rollback_of=d3, undoes=d4, created_at=until - 20 * D - 4 * H
    )
    row(project, "cancelled", until - 18 * D, failure_reason="superseded")
    d6 = row(project, "success", until - 10 * D, committed=until - 10 * D - H)  # 1h
    # Rolled back nine days later: past CONVEYOR_DORA_FAILURE_WINDOW (7d), not a failed change.
    r2 = row(project, "success", until - 1 * D + timedelta(minutes=10))
    Deployment.objects.filter(pk=r2.pk).update(rollback_of=d4, undoes=d6, created_at=until - 1 * D)
    row(project, "failed", until - 12 * H)  # still failing at the end
    row(project, "success", until - 5 * D, environment="staging", committed=until - 6 * D)


# By hand, over the 30 days before T (finished in [T - 30d, T); the cancelled one ignored):
#   successes: d1, d3, d4, r1, d6, r2 = 6 -> 6 / 30 = 0.2 a day
#   lead times of non-rollback successes: 2h, 2.5h, 6h, 1h -> median (2h + 2.5h) / 2 = 8100s
#   changes (non-rollbacks): d1, d2, d3, d4, d6, d7 = 6; failed: d2, d4 (rolled back 2h after),
#     d7 = 3 -> 0.5
#   incidents: d2 (27d15h) closed by d3 (27d13.5h): 1.5h; d4 (20d6h) closed by r1 (20d3.5h):
#     2.5h; d7 still open -> median 2h = 7200s, 2 restored, 1 open
THIRTY_DAYS = {
    "deployment_frequency": {"deployments": 6, "per_day": 0.2},
    "lead_time_for_changes": {"median_seconds": 8100.0, "measured": 4},
    "change_failure_rate": {"changes": 6, "failed": 3, "rate": 0.5},
    "time_to_restore": {"median_seconds": 7200.0, "restored": 2, "open": 1},
}
# Over 7 days: r2 (a rollback: no lead time) and d7 (failed, open).
SEVEN_DAYS = {
    "deployment_frequency": {"deployments": 1, "per_day": 0.1429},
    "lead_time_for_changes": {"median_seconds": None, "measured": 0},
    "change_failure_rate": {"changes": 1, "failed": 1, "rate": 1.0},
    "time_to_restore": {"median_seconds": None, "restored": 0, "open": 1},
}


def metrics(project, days, until=T, environment="production") -> dict:
    found = dora_metrics(project=project, environment=environment, days=days, until=until)
    return {key: found[key] for key in THIRTY_DAYS}


def test_the_four_numbers_match_the_ones_worked_out_by_hand(make_project):
    project = make_project("shop")
    history(project, T)
    assert metrics(project, 30) == THIRTY_DAYS
    assert metrics(project, 7) == SEVEN_DAYS


def test_the_window_includes_its_start_and_excludes_its_end(make_project):
    project = make_project("edge")
    row(project, "success", T - 7 * D, committed=T - 7 * D - H)
    row(project, "success", T, committed=T - 2 * H)
    counted = metrics(project, 7)  # the first one (a 1h lead time), not the second
    assert counted["deployment_frequency"]["deployments"] == 1
    assert counted["lead_time_for_changes"] == {"median_seconds": 3600.0, "measured": 1}
    later = metrics(project, 7, until=T + timedelta(seconds=1))  # the second one only
    assert later["deployment_frequency"]["deployments"] == 1
    assert later["lead_time_for_changes"] == {"median_seconds": 7200.0, "measured": 1}


def test_the_failure_window_setting_decides_whether_a_late_rollback_counts(make_project, settings):
    project = make_project("shop")
    history(project, T)
    # now d6's rollback, nine days on, counts
    settings.CONVEYOR_DORA_FAILURE_WINDOW = timedelta(days=10)
    rate = metrics(project, 30)["change_failure_rate"]
    assert rate == {"changes": 6, "failed": 4, "rate": 0.6667}


def test_the_api_answers_the_same_numbers(make_project, project_api):
    from django.utils import timezone

    project = make_project("shop", default_environment="production")
    history(project, timezone.now())
    api = project_api("read", project)
    body = api.get("/projects/shop/metrics/dora", days=30).json()
    assert body["environment"] == "production" and body["days"] == 30
    assert {key: body[key] for key in THIRTY_DAYS} == THIRTY_DAYS
    seven = api.get("/projects/shop/metrics/dora", environment="production", days=7).json()
    assert {key: seven[key] for key in SEVEN_DAYS} == SEVEN_DAYS
    staging = api.get("/projects/shop/metrics/dora", environment="staging", days=7).json()
    assert staging["deployment_frequency"]["deployments"] == 1
    assert staging["lead_time_for_changes"]["median_seconds"] == 86400.0

    assert_error(api.get("/projects/shop/metrics/dora", days=0), 422, "invalid")
    assert_error(api.get("/projects/shop/metrics/dora", days=366), 422, "invalid")
    assert_error(api.get("/projects/shop/metrics/dora", environment="../x"), 422, "invalid")
    assert_error(api.get("/projects/nope/metrics/dora"), 404, "not_found")


@pytest.mark.parametrize("days", [7, 30, 90])
def test_an_environment_without_deployments_has_empty_metrics(make_project, days):
    empty = dora_metrics(project=make_project("quiet"), environment="production", days=days)
    assert empty["deployment_frequency"] == {"deployments": 0, "per_day": 0.0}
    assert empty["change_failure_rate"]["rate"] is None
    assert empty["time_to_restore"] == {"median_seconds": None, "restored": 0, "open": 0}
