"""Unique jobs: one live job per unique key, kept by a partial unique index."""

import importlib
import subprocess
import time
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import services
from jobs.errors import IllegalTransition
from jobs.models import Job, JobStatus
from jobs.unique import Unique
from tests.foundation.test_embedded import embedded_env, manage
from tests.processes import PYTHON, ROOT, wait_until

S = JobStatus


def live(task: str = "tests.unique_record") -> int:
    return Job.objects.filter(task=task).count()


@pytest.mark.django_db
def test_a_declared_rule_answers_the_live_job_for_the_same_key():
    first = services.enqueue("tests.unique_record", {"customer": 7, "n": 1})
    second = services.enqueue("tests.unique_record", {"customer": 7, "n": 2})
    other = services.enqueue("tests.unique_record", {"customer": 8, "n": 3})
    assert second.pk == first.pk and second.unique_conflict and not first.unique_conflict
    assert other.pk != first.pk
    assert live() == 2
    row = Job.objects.get(pk=first.pk)
    assert row.unique_states == ",queued,running,retrying,succeeded,"
    assert row.unique_period == timedelta(minutes=5) and len(row.unique_key) == 64


@pytest.mark.django_db
def test_an_explicit_key_and_the_whole_payload_and_turning_it_off():
    by_key = Unique(key="nightly-report")
    a = services.enqueue("tests.record", {"n": 1}, unique=by_key)
    b = services.enqueue("tests.record", {"n": 2}, unique=by_key)
    assert a.pk == b.pk and b.unique_conflict
    whole = services.enqueue("tests.record", {"n": 1}, unique=True)
    assert whole.pk != a.pk
    assert services.enqueue("tests.record", {"n": 1}, unique=True).pk == whole.pk
    off = services.enqueue("tests.unique_record", {"customer": 1}, unique=False)
    assert services.enqueue("tests.unique_record", {"customer": 1}).pk != off.pk
    assert Job.objects.get(pk=off.pk).unique_key is None


@pytest.mark.django_db
def test_a_bad_rule_given_to_enqueue_is_refused():
    for rule, words in [
        (Unique(period=timedelta(0)), "period must be a positive"),
        (Unique(states=frozenset({"queued", "gone"})), "are not job statuses"),
        (Unique(keys=("a", 3)), "keys must be a tuple"),
        (Unique(states=frozenset({"queued", "running"})), "must include queued, running and"),
    ]:
        with pytest.raises(ValueError, match=words):
            services.enqueue("tests.record", {}, unique=rule)
    assert Job.objects.count() == 0


def test_eight_processes_enqueueing_one_unique_job_make_one_row(worker_env, tmp_path):
    go = tmp_path / "go"
    code = (
        "import os, time, pathlib, tests.jobtasks\n"
        "from django.db import connection, transaction\n"
        "from jobs import services\n"
        f"go = pathlib.Path({str(go)!r})\n"
        "connection.ensure_connection()\n"
        "(go.parent / f'ready-{os.getpid()}').touch()\n"
        "while not go.exists(): time.sleep(0.005)\n"
        "with transaction.atomic():\n"
        "    job = services.enqueue('tests.unique_record', {'customer': 42})\n"
        "    time.sleep(0.3)  # hold the row uncommitted: the others wait on the index\n"
        "print('job', job.pk, job.unique_conflict)\n"
    )
    procs = [
        subprocess.Popen(
            [PYTHON, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=worker_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    wait_until(lambda: len(list(tmp_path.glob("ready-*"))) == 8, timeout=120)
    go.touch()  # all eight are connected and waiting: they insert at once
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        answers.append(out.strip().splitlines()[-1].split())
    rows = list(Job.objects.filter(task="tests.unique_record").values_list("pk", flat=True))
    assert len(rows) == 1
    assert {int(pk) for _, pk, _ in answers} == {rows[0]}
    assert sorted(conflict for _, _, conflict in answers) == ["False"] + ["True"] * 7


@pytest.mark.django_db
def test_period_buckets_one_row_per_bucket():
    rule = Unique(keys=("customer",), period=timedelta(seconds=2))
    # Start just after a bucket's start, so the first two enqueues share it.
    wait_until(lambda: timezone.now().timestamp() % 2 < 0.2, timeout=5, interval=0.01)
    first = services.enqueue("tests.record", {"customer": 1}, unique=rule)
    same = services.enqueue("tests.record", {"customer": 1}, unique=rule)
    assert same.pk == first.pk
    time.sleep(2)
    later = services.enqueue("tests.record", {"customer": 1}, unique=rule)
    assert later.pk != first.pk and not later.unique_conflict
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_cancelled_job_frees_its_key_and_its_retry_then_conflicts():
    first = services.enqueue("tests.unique_record", {"customer": 5})
    services.job_cancel(first.pk, actor="test")
    second = services.enqueue("tests.unique_record", {"customer": 5})
    assert second.pk != first.pk and not second.unique_conflict
    with pytest.raises(IllegalTransition, match="a newer job with its unique key is live"):
        services.job_retry(first.pk, actor="test")
    assert Job.objects.get(pk=first.pk).status == S.CANCELLED
    services.job_cancel(second.pk, actor="test")
    assert services.job_retry(first.pk, actor="test").status == S.QUEUED


def test_running_and_succeeded_jobs_hold_the_key_and_a_dead_one_frees_it(start_worker):
    start_worker(concurrency=1)
    rule = Unique(key="one-at-a-time")
    first = services.enqueue("tests.record", {"sleep": 3}, unique=rule)
    wait_until(lambda: Job.objects.get(pk=first.pk).status == S.RUNNING, timeout=60)
    assert services.enqueue("tests.record", {}, unique=rule).pk == first.pk
    wait_until(lambda: Job.objects.get(pk=first.pk).status == S.SUCCEEDED, timeout=60)
    assert services.enqueue("tests.record", {}, unique=rule).pk == first.pk

    doomed = services.enqueue("tests.permanent", {}, unique=Unique(key="k"))
    wait_until(lambda: Job.objects.get(pk=doomed.pk).status == S.DEAD, timeout=60)
    again = services.enqueue("tests.permanent", {}, unique=Unique(key="k"))
    assert again.pk != doomed.pk and not again.unique_conflict


@pytest.mark.django_db
def test_a_non_unique_integrity_error_still_propagates(monkeypatch):
    enqueue_module = importlib.import_module("jobs.services.enqueue")  # not the function

    services.enqueue("tests.unique_record", {"customer": 1})
    # max_attempts' CHECK constraint, not the unique key (past enqueue's own check of it)
    monkeypatch.setattr(enqueue_module, "validate_placement", lambda queue, max_attempts: None)
    with pytest.raises(IntegrityError), transaction.atomic():
        services.enqueue("tests.unique_record", {"customer": 2}, max_attempts=-1)
    assert live() == 1


@pytest.mark.django_db
def test_an_idempotency_key_still_wins_first():
    first = services.enqueue("tests.unique_record", {"customer": 1}, idempotency_key="k1")
    again = services.enqueue("tests.unique_record", {"customer": 2}, idempotency_key="k1")
    assert again.pk == first.pk and live() == 1
    assert again.unique_conflict is False  # an idempotent repeat, not a unique conflict


@pytest.mark.django_db
def test_a_unique_enqueue_costs_no_extra_round_trip():
    with transaction.atomic():
        with CaptureQueriesContext(connection) as plain:
            services.enqueue("tests.record", {"customer": 1})
        with CaptureQueriesContext(connection) as unique:
            services.enqueue("tests.unique_record", {"customer": 1})
        with CaptureQueriesContext(connection) as conflict:
            services.enqueue("tests.unique_record", {"customer": 1})
    # The same one INSERT (with ON CONFLICT); a conflict adds the read of the holder.
    assert len(plain) == 1, plain.captured_queries
    assert len(unique) == len(plain), unique.captured_queries
    assert len(conflict) == len(plain) + 1, conflict.captured_queries


@pytest.mark.django_db
def test_enqueue_many_skips_live_keys_and_answers_in_order():
    held = services.enqueue("tests.unique_record", {"customer": 2})
    jobs = services.enqueue_many(
        "tests.unique_record", [{"customer": 1}, {"customer": 2}, {"customer": 3}]
    )
    assert jobs[1].pk == held.pk and jobs[1].unique_conflict
    assert [job.unique_conflict for job in jobs] == [False, True, False]
    assert [job.payload["customer"] for job in jobs] == [1, 2, 3]
    assert live() == 3


def test_the_index_condition_works_on_sqlite(tmp_path):
    env = embedded_env(tmp_path)
    manage(env, "migrate", "--noinput")
    code = (
        "from jobs import services\n"
        "from jobs.models import Job\n"
        "from jobs.unique import Unique\n"
        "rule = Unique(key='k')\n"
        "a = services.enqueue('jobs.noop', {}, unique=rule)\n"
        "b = services.enqueue('jobs.noop', {}, unique=rule)\n"
        "services.job_cancel(a.pk, actor='test')\n"
        "c = services.enqueue('jobs.noop', {}, unique=rule)\n"
        "print(a.pk == b.pk, c.pk != a.pk, Job.objects.count())\n"
    )
    out = manage(env, "shell", "-c", code)
    assert out.stdout.strip().splitlines()[-1] == "True True 2"


def test_a_bad_declaration_stops_start_up_in_one_line(tmp_path):
    app = tmp_path / "badunique"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(
        "from datetime import timedelta\n"
        "from celery import shared_task\n"
        "from jobs.task import JobTask\n"
        "from jobs.unique import Unique\n"
        "@shared_task(base=JobTask, name='bad.unique', unique=Unique(period=timedelta(-1)))\n"
        "def bad(ctx): pass\n"
    )
    (tmp_path / "badsettings.py").write_text(
        "from project.settings import *  # noqa\nINSTALLED_APPS = [*INSTALLED_APPS, 'badunique']\n"
    )
    env = embedded_env(tmp_path)
    env.update(PYTHONPATH=str(tmp_path), DJANGO_SETTINGS_MODULE="badsettings")
    out = subprocess.run(
        [PYTHON, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "conveyor: cannot start: task 'bad.unique': unique rule: period must be a positive "
        "timedelta or None, not datetime.timedelta(days=-1)"
    ]


@pytest.mark.django_db
def test_the_admin_page_shows_the_unique_key_states_and_period(admin_client):
    job = services.enqueue("tests.unique_record", {"customer": 1})
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    row = Job.objects.get(pk=job.pk)
    assert row.unique_key in page and row.unique_states in page and "0:05:00" in page
