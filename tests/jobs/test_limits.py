"""Task limits (concurrency, per key, rates, fairness) and task pauses, exact across workers."""

import subprocess
import time
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from jobs import completer, limiter, outcome, publish, services, statements, task_states
from jobs.limits import Limit, parse_rate
from jobs.maintenance.reaper import reap
from jobs.models import Job, JobStatus, LimitKeyState
from jobs.tasks import noop
from tests.foundation.test_embedded import embedded_env, manage
from tests.jobtasks import samples
from tests.processes import PYTHON, ROOT, wait_until

S = JobStatus


@pytest.mark.parametrize(
    ("limit", "problem"),
    [
        (Limit(concurrency=0), "concurrency must be a positive integer"),
        (Limit(concurrency=True), "concurrency must be a positive integer"),
        (Limit(rate="5/d"), "rate: a rate is N/s, N/m or N/h"),
        (Limit(rate="0/s"), "rate: a rate is N/s"),
        (Limit(key_concurrency=1), "need key"),
        (Limit(key="tenant", key_concurrency=1), "key must be a tuple"),
        (Limit(key=(), fair=True), "key must be a tuple"),
        (Limit(), "a limit needs at least one"),
    ],
)
def test_a_limit_that_cannot_work_says_why(limit, problem):
    assert problem in limit.problem()


def test_rates_parse_per_second_minute_and_hour():
    assert [str(parse_rate(text)) for text in ("5/s", " 100 / m", "1000/h")] == [
        "5/s",
        "100/m",
        "1000/h",
    ]
    assert parse_rate("100/m").period == timedelta(minutes=1)


@pytest.mark.parametrize(
    ("declaration", "line"),
    [
        (
            "@shared_task(base=JobTask, name='bad.limit', limit=Limit(rate='fast'))",
            "task 'bad.limit': limit: rate: a rate is N/s, N/m or N/h (e.g. '5/s'), not 'fast'",
        ),
        (
            "@shared_task(name='bad.limit', limit=Limit(concurrency=1))",
            "task 'bad.limit': a limit needs a job task (base=jobs.task.JobTask)",
        ),
    ],
)
def test_a_bad_limit_stops_start_up_in_one_line(tmp_path, declaration, line):
    app = tmp_path / "badlimit"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(
        "from celery import shared_task\n"
        "from jobs.limits import Limit\n"
        "from jobs.task import JobTask\n"
        f"{declaration}\n"
        "def bad(ctx): pass\n"
    )
    (tmp_path / "badsettings.py").write_text(
        "from project.settings import *  # noqa\nINSTALLED_APPS = [*INSTALLED_APPS, 'badlimit']\n"
    )
    env = embedded_env(tmp_path)
    env.update(PYTHONPATH=str(tmp_path), DJANGO_SETTINGS_MODULE="badsettings")
    out = subprocess.run(
        [PYTHON, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [f"conveyor: cannot start: {line}"]


def _enqueue(task: str, tenants, key: str, max_attempts=None, **payload) -> list[Job]:
    return [
        services.enqueue(task, {"key": key, "tenant": t, **payload}, max_attempts=max_attempts)
        for t in tenants
    ]


@pytest.mark.django_db
def test_a_job_carries_its_limit_key_and_held_jobs_spend_no_attempt_and_say_why(admin_client):
    a1, a2, b1, c1 = _enqueue("tests.limited", "aabc", "k")
    assert [a1.limit_key, b1.limit_key] == ['"a"', '"b"']
    assert services.job_claim(a1.pk, worker="w/1") is not None
    assert services.job_claim(a2.pk, worker="w/2") is None  # tenant a has its one slot
    assert services.job_claim(b1.pk, worker="w/3") is not None
    assert services.job_claim(c1.pk, worker="w/4") is None  # the task has its two
    held = Job.objects.filter(pk__in=[a2.pk, c1.pk]).values_list("status", "attempts")
    assert set(held) == {(S.QUEUED, 0)}
    assert limiter.why_waiting(Job.objects.get(pk=a2.pk)) == (
        "its task is at its concurrency limit (2 running)"
    )
    Job.objects.filter(pk=b1.pk).update(status=S.SUCCEEDED)  # a slot frees; tenant a's is taken
    assert (
        limiter.why_waiting(Job.objects.get(pk=a2.pk)) == 'its key "a" is at its limit (1 running)'
    )
    assert limiter.why_waiting(Job.objects.get(pk=c1.pk)).startswith("nothing holds it back")
    page = admin_client.get(f"/admin/jobs/job/{a2.pk}/change/").content.decode()
    assert "Waiting because" in page and "is at its limit" in page
    described = task_states.describe(["tests.limited"], busiest_keys=True)[0]
    assert described["running"] == 1
    assert described["limit"]["concurrency"] == 2
    assert described["busiest_keys"] == [{"key": '"a"', "running": 1}]


@pytest.mark.django_db
def test_a_per_key_rate_holds_that_key_only_and_says_until_when():
    jobs = _enqueue("tests.rated", "aaaaaab", "k")
    claimed = [services.job_claim(job.pk, worker=f"w/{i}") for i, job in enumerate(jobs)]
    assert [job is not None for job in claimed] == [True] * 5 + [False, True]
    state = LimitKeyState.objects.get(task="tests.rated", key='"a"')
    assert len(state.starts) == 5
    assert timezone.now() < state.full_until <= timezone.now() + timedelta(seconds=1)
    assert LimitKeyState.objects.get(task="tests.rated", key='"b"').full_until is None


@pytest.mark.django_db
def test_a_fair_task_serves_its_keys_round_robin():
    many = _enqueue("tests.fair", "a" * 6, "k")
    _enqueue("tests.fair", "bb", "k")
    plan = limiter.Plan(limit=Limit(key=("tenant",), fair=True))
    order = []
    for i in range(6):
        job = limiter.claim(plan, many[0].pk, task="tests.fair", worker=f"w/{i}")
        order.append(job.payload["tenant"])
    assert order == ["a", "b", "a", "b", "a", "a"]


@pytest.mark.django_db
def test_a_paused_task_starts_nothing_in_any_queue_and_resume_lets_it_run():
    job = services.enqueue("jobs.noop", {})
    elsewhere = services.enqueue("jobs.noop", {}, queue="emails")
    other = services.enqueue("tests.limited", {"key": "k", "tenant": "a"})
    task_states.pause("jobs.noop", actor="test")
    task_states.pause("tests.limited", actor="test")
    noop(job.pk)
    noop(elsewhere.pk)
    assert services.job_claim(other.pk, worker="w/1") is None  # a limited claim checks it too
    statuses = Job.objects.filter(pk__in=[job.pk, elsewhere.pk, other.pk]).values_list(
        "status", flat=True
    )
    assert set(statuses) == {S.QUEUED}
    assert task_states.paused_names() == {"jobs.noop", "tests.limited"}
    task_states.resume("jobs.noop", actor="test")
    noop(job.pk)
    assert Job.objects.get(pk=job.pk).status == S.SUCCEEDED
    with pytest.raises(task_states.UnknownTask, match="no job task named 'nope'"):
        task_states.pause("nope", actor="test")


@pytest.mark.django_db
def test_a_freed_slot_rings_for_a_job_held_in_another_queue(
    monkeypatch, django_capture_on_commit_callbacks
):
    a, b = _enqueue("tests.limited", "ab", "k")
    held = services.enqueue("tests.limited", {"key": "k", "tenant": "c"}, queue="emails")
    first = services.job_claim(a.pk, worker="w/1")
    assert services.job_claim(b.pk, worker="w/2") is not None
    assert services.job_claim(held.pk, worker="w/3") is None  # the task has its two
    rung = []
    monkeypatch.setattr("jobs.queues.publish", lambda jobs: rung.extend(j.pk for j in jobs))
    with django_capture_on_commit_callbacks(execute=True):
        completer.finish(outcome.Decision(S.SUCCEEDED, result="null"), first)
    assert rung == [held.pk]  # the limit spans queues: so does the doorbell of a freed slot


@pytest.mark.django_db
def test_a_runs_end_rings_only_after_a_refused_claim_and_clears_the_mark_when_none_wait(
    monkeypatch, django_capture_on_commit_callbacks
):
    from jobs.models import TaskState

    a, b, c = _enqueue("tests.limited", "abc", "k")
    rung = []
    monkeypatch.setattr("jobs.queues.publish", lambda jobs: rung.extend(j.pk for j in jobs) or 0)
    first = services.job_claim(a.pk, worker="w/1")
    with django_capture_on_commit_callbacks(execute=True):
        completer.finish(outcome.Decision(S.SUCCEEDED, result="null"), first)
    assert rung == []  # b and c are due, but no claim was refused: the limit didn't bind
    second = services.job_claim(b.pk, worker="w/2")
    assert services.job_claim(c.pk, worker="w/3") is not None
    d = services.enqueue("tests.limited", {"key": "k", "tenant": "d"})
    assert services.job_claim(d.pk, worker="w/4") is None  # two run: refused, and marked
    assert TaskState.objects.get(name="tests.limited").held_at is not None
    with django_capture_on_commit_callbacks(execute=True):
        completer.finish(outcome.Decision(S.SUCCEEDED, result="null"), second)
    assert rung == [d.pk]
    assert services.job_claim(d.pk, worker="w/4") is not None
    third = Job.objects.get(pk=c.pk)
    with django_capture_on_commit_callbacks(execute=True):
        completer.finish(outcome.Decision(S.SUCCEEDED, result="null"), third)
    assert rung == [d.pk]  # nothing due: no doorbell, and the mark is cleared
    assert TaskState.objects.get(name="tests.limited").held_at is None


@pytest.mark.django_db
def test_a_ring_that_sends_nothing_keeps_the_mark_while_a_held_job_is_due(
    monkeypatch, django_capture_on_commit_callbacks
):
    from jobs.models import TaskState

    a, b, c = _enqueue("tests.limited", "abc", "k")
    first = services.job_claim(a.pk, worker="w/1")
    assert services.job_claim(b.pk, worker="w/2") is not None
    assert services.job_claim(c.pk, worker="w/3") is None  # refused, and marked
    monkeypatch.setattr("jobs.queues.publish", lambda jobs: 0)  # the broker is away
    with django_capture_on_commit_callbacks(execute=True):
        completer.finish(outcome.Decision(S.SUCCEEDED, result="null"), first)
    assert TaskState.objects.get(name="tests.limited").held_at is not None  # c is still due
    monkeypatch.undo()
    Job.objects.filter(pk=c.pk).update(status=S.CANCELLED)  # nothing due any more
    second = Job.objects.get(pk=b.pk)
    with django_capture_on_commit_callbacks(execute=True):
        completer.finish(outcome.Decision(S.SUCCEEDED, result="null"), second)
    assert TaskState.objects.get(name="tests.limited").held_at is None


@pytest.mark.django_db
def test_a_success_folded_into_a_limited_claim_wakes_only_if_its_lock_saw_a_refusal(
    monkeypatch, django_capture_on_commit_callbacks
):
    from jobs.limits import limit_of
    from jobs.models import TaskState
    from project.celery import app

    plan = limiter.Plan(limit=limit_of(app.tasks["tests.limited"]))
    a, b, c = _enqueue("tests.limited", "abc", "k")
    rung = []
    monkeypatch.setattr("jobs.queues.publish", lambda jobs: rung.extend(j.pk for j in jobs) or 0)
    first = services.job_claim(a.pk, worker="w/1")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        settled, [second] = completer.succeed_many_and_claim(
            [_ran(first)], b.pk, 1, plan=plan, task="tests.limited", worker="w/1"
        )
    assert settled == [(first, True)] and second.pk == b.pk
    assert callbacks == [] and rung == []  # no refusal seen: nothing to wake, not even a read
    assert services.job_claim(c.pk, worker="w/2") is not None
    d = services.enqueue("tests.limited", {"key": "k", "tenant": "d"})
    assert services.job_claim(d.pk, worker="w/3") is None  # b and c run: refused, marked
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        settled, [third] = completer.succeed_many_and_claim(
            [_ran(second)], d.pk, 1, plan=plan, task="tests.limited", worker="w/1"
        )
    # b's end, in the same transaction, freed it
    assert settled == [(second, True)] and third.pk == d.pk
    assert len(callbacks) == 1 and rung == []  # the mark seen: a wake, which finds none due
    assert TaskState.objects.get(name="tests.limited").held_at is None


@pytest.mark.django_db
def test_a_success_written_alone_reads_the_marks_in_its_own_statement(
    monkeypatch, django_capture_on_commit_callbacks
):
    """A limited job's success (a single job, a batch's last chunk) reads the refusal mark in
    its UPDATE's statement: with none, no read follows its commit; with one, it wakes."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    a, b, c = _enqueue("tests.limited", "abc", "k")
    rung = []
    monkeypatch.setattr("jobs.queues.publish", lambda jobs: rung.extend(j.pk for j in jobs) or 0)
    first = services.job_claim(a.pk, worker="w/1")
    capture = django_capture_on_commit_callbacks(execute=True)
    with capture as callbacks, CaptureQueriesContext(connection) as queries:
        assert completer.succeed_many([_ran(first)]) == [(first, True)]
    assert callbacks == [] and rung == []  # the limit didn't bind: nothing after the end
    if connection.vendor == "postgresql":
        assert len(queries.captured_queries) == 1
    second = services.job_claim(b.pk, worker="w/2")
    assert services.job_claim(c.pk, worker="w/3") is not None
    d = services.enqueue("tests.limited", {"key": "k", "tenant": "d"})
    assert services.job_claim(d.pk, worker="w/4") is None  # two run: refused, and marked
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        completer.succeed_many([_ran(second)])
    assert len(callbacks) == 1 and rung == [d.pk]  # the mark read: the freed slot rings


def _ran(job):
    now = timezone.now()
    return statements.Success(job, "null", now, now)


@pytest.mark.django_db
def test_a_chunk_under_a_slot_limit_takes_a_chunk_only_while_the_limit_is_far_from_full():
    from jobs.models import TaskState

    plan = limiter.Plan(limit=Limit(concurrency=12))
    assert (
        plan.takes_chunks and not limiter.Plan(limit=Limit(concurrency=3, fair=True)).takes_chunks
    )
    jobs = [services.enqueue("jobs.noop", {}) for _ in range(14)]
    assert limiter.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/1").pk == jobs[0].pk

    def chunk(worker: str):
        claimed, holds = limiter.claim_reading_holds(
            plan, jobs[0].pk, task="jobs.noop", worker=worker, count=5
        )
        return [job.pk for job in claimed], holds

    assert chunk("w/2")[0] == [job.pk for job in jobs[1:6]]  # 11 free: room for two chunks
    assert chunk("w/3")[0] == [jobs[6].pk]  # 6 free: one, the rest left to other workers
    for worker in ("w/4", "w/5", "w/6", "w/7", "w/8"):
        assert len(chunk(worker)[0]) == 1
    taken, holds = chunk("w/9")
    assert taken == [] and holds is not None  # full
    assert Job.objects.filter(status=S.RUNNING).count() == 12
    assert TaskState.objects.get(name="jobs.noop").held_at is not None  # a slot will ring
    assert [limiter.chunk_within(5, free) for free in (0, 1, 9, 10, 50)] == [0, 1, 1, 5, 5]


@pytest.mark.django_db
def test_a_job_held_by_an_hourly_rate_is_rung_for_within_the_publish_horizon(
    monkeypatch, django_capture_on_commit_callbacks
):
    from jobs.publish import SCHEDULE_HORIZON_SECONDS

    plan = limiter.Plan(limit=Limit(rate="1/h"))
    first, held = (services.enqueue("jobs.noop", {}) for _ in range(2))
    assert limiter.claim(plan, first.pk, task="jobs.noop", worker="w/1") is not None
    sent = []
    monkeypatch.setattr("jobs.publish.messages", lambda jobs: sent.extend(jobs) or [])
    with django_capture_on_commit_callbacks(execute=True):
        assert limiter.claim(plan, held.pk, task="jobs.noop", worker="w/2") is None
    [rung] = sent  # the window frees in an hour: beyond the horizon a doorbell is not sent
    horizon = timezone.now() + timedelta(seconds=SCHEDULE_HORIZON_SECONDS)
    assert rung.pk == held.pk and rung.run_after <= horizon


TENANTS = "abcdef"
LIMIT_ENV = {"CONVEYOR_JOB_LEASE_TIMEOUT": "6s"}


def test_task_limits_hold_across_three_workers_and_a_killed_worker_frees_its_slots(
    start_worker,
):
    key = f"limited:{uuid.uuid4().hex}"
    client = samples()
    workers = [start_worker(queues="default", concurrency=2, env=LIMIT_ENV) for _ in range(3)]
    jobs = _enqueue("tests.limited", TENANTS * 5, key, sleep=0.2)
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() == len(ids),
        timeout=120,
        message="the limited backlog to drain",
    )
    seen = [int(v) for v in client.lrange(f"{key}:seen", 0, -1)]
    assert max(seen) == 2, seen  # never above the task's limit, and the limit reached
    for tenant in TENANTS:
        assert {int(v) for v in client.lrange(f"{key}:seen:{tenant}", 0, -1)} == {1}
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    # kill -9 the workers holding both slots: the reaper frees them within the lease.
    long = _enqueue("tests.limited", "ab", key, max_attempts=1, sleep=30)
    running = Job.objects.filter(pk__in=[j.pk for j in long], status=S.RUNNING)
    holders = wait_until(
        lambda: set(running.values_list("locked_by", flat=True)) if running.count() == 2 else None,
        timeout=60,
        message="both slots to be taken",
    )
    for worker in workers:
        if any(owner.startswith(f"{worker.name}@") for owner in holders):
            worker.kill()
    if all(w.process.poll() is not None for w in workers):
        start_worker(queues="default", concurrency=2, env=LIMIT_ENV)
    after = _enqueue("tests.limited", "c", key)[0]
    reaped = []
    wait_until(
        lambda: reaped.append(reap().dead) or sum(reaped) == 2,
        timeout=30,
        interval=0.5,
        message="the reaper",
    )
    wait_until(
        lambda: Job.objects.filter(pk=after.pk, status=S.SUCCEEDED).exists(),
        timeout=30,
        message="a job to start in a freed slot",
    )


RATE_SECONDS = 20


def test_a_per_key_rate_gives_no_window_above_it_across_workers(start_worker):
    key = f"rated:{uuid.uuid4().hex}"
    for _ in range(2):
        start_worker(queues="default", concurrency=2)
    jobs = _enqueue("tests.rated", "a" * (5 * RATE_SECONDS) + "b" * 10, key)
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() == len(ids),
        timeout=RATE_SECONDS * 4,
        message="the rated backlog to drain",
    )
    for tenant in "ab":
        starts = sorted(
            Job.objects.filter(pk__in=ids, payload__tenant=tenant).values_list(
                "started_at", flat=True
            )
        )
        crowded = [
            i for i in range(len(starts) - 5) if starts[i + 5] - starts[i] < timedelta(seconds=1)
        ]
        assert not crowded, f"tenant {tenant}: six starts within a second at {crowded[:3]}"
    a_starts = sorted(
        Job.objects.filter(pk__in=ids, payload__tenant="a").values_list("started_at", flat=True)
    )
    assert a_starts[-1] - a_starts[0] >= timedelta(seconds=RATE_SECONDS - 1)


@pytest.mark.parametrize(("task", "per_second"), [("tests.rated", 5), ("tests.task_rated", 10)])
def test_a_rated_backlog_sent_in_batch_messages_keeps_every_doorbell(
    start_worker, task, per_second
):
    """64 jobs enqueued together go out as 16 messages of 4 doorbells. A rate window that
    refuses a message's claim rings all its unused doorbells again when it frees, not one:
    with no sweeper running, every job still starts, at the rate."""
    key = f"backlog:{uuid.uuid4().hex}"
    ids = [job.pk for job in services.enqueue_many(task, [{"key": key, "tenant": "a"}] * 64)]
    start_worker(queues="default", concurrency=2)
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() == len(ids),
        timeout=4 * len(ids) / per_second,
        message="the rated backlog to drain on its doorbells",
    )
    starts = sorted(Job.objects.filter(pk__in=ids).values_list("started_at", flat=True))
    assert starts[-1] - starts[0] >= timedelta(seconds=len(ids) / per_second - 2)


@pytest.mark.django_db
def test_a_rate_rings_a_messages_unused_doorbells_from_the_first_of_them_still_there(
    monkeypatch, django_capture_on_commit_callbacks
):
    """A message rung again names jobs another message may have run and purged since: the
    claim takes its queue from the first still there, and a refusal rings the rest."""
    rung = []
    monkeypatch.setattr(limiter, "ring_later", lambda task, queue, ids, when: rung.append(ids))
    plan = limiter.Plan(limit=Limit(rate="1/h"))
    gone, *ids = [services.enqueue("tests.task_rated", {}).pk for _ in range(4)]
    Job.objects.filter(pk=gone).delete()
    claim = {"task": "tests.task_rated", "worker": "w/1"}
    with transaction.atomic():
        first, _ = limiter.claim_reading_holds(plan, gone, doorbells=[gone, *ids], **claim)
    assert [job.pk for job in first] == [ids[0]]
    with django_capture_on_commit_callbacks(execute=True):  # the hour's one start is spent
        assert limiter.claim_reading_holds(plan, ids[1], doorbells=ids[1:], **claim)[0] == []
    assert rung == [ids[1:]]  # all rung again, in one call
    with django_capture_on_commit_callbacks(execute=True) as single:
        limiter.claim_reading_holds(plan, ids[1], **claim)  # a message's own doorbell
    with django_capture_on_commit_callbacks(execute=True) as none:
        limiter.claim_reading_holds(plan, ids[1], doorbells=(), **claim)  # the caller's
    assert rung == [ids[1:]] and len(single) == 1 and none == []


def test_a_rung_again_list_goes_out_in_messages_of_the_batch_size(monkeypatch):
    from project.celery import app

    sent = []
    monkeypatch.setattr(app, "send_task", lambda task, args, **kw: sent.append(args[0]))
    when = timezone.now() + timedelta(seconds=1)
    publish.ring_later("tests.task_rated", "default", list(range(1, 61)), when)
    assert [len(ids) for ids in sent] == [25, 25, 10]
    sent.clear()
    monkeypatch.setattr(app.tasks["tests.task_rated"], "batch", False)
    publish.ring_later("tests.task_rated", "default", [1, 2, 3], when)
    assert sent == [1, 2, 3]  # one doorbell a message, as the task's jobs now go


def test_with_fair_sharing_a_small_tenant_is_not_starved_by_a_big_one(start_worker):
    key = f"fair:{uuid.uuid4().hex}"
    big = services.enqueue_many("tests.fair", [{"key": key, "tenant": "a"}] * 1000)
    small = services.enqueue_many("tests.fair", [{"key": key, "tenant": "b"}] * 10)
    start_worker(queues="default", concurrency=2)
    small_ids = [job.pk for job in small]
    wait_until(
        lambda: Job.objects.filter(pk__in=small_ids, status=S.SUCCEEDED).count() == 10,
        timeout=120,
        message="the small tenant's jobs to finish",
    )
    last = max(Job.objects.filter(pk__in=small_ids).values_list("finished_at", flat=True))
    before = Job.objects.filter(pk__in=[j.pk for j in big], finished_at__lte=last).count()
    assert before < 100, f"{before} of the big tenant's jobs finished first"


def test_a_paused_task_starts_nothing_across_a_worker_restart_and_resume_drains_it(
    start_worker,
):
    key = f"paused-task:{uuid.uuid4().hex}"
    client = samples()
    task_states.pause("tests.stamp", actor="test")
    worker = start_worker(queues="default", concurrency=2)
    held = services.enqueue_many("tests.stamp", [{"key": key}] * 10)
    others = services.enqueue_many("tests.occupy", [{"key": f"{key}:other"}] * 5)
    wait_until(
        lambda: Job.objects.filter(pk__in=[j.pk for j in others], status=S.SUCCEEDED).count() == 5,
        timeout=60,
        message="another task to run",
    )
    worker.stop()
    start_worker(queues="default", concurrency=2)
    time.sleep(3)
    assert client.llen(key) == 0
    statuses = Job.objects.filter(pk__in=[j.pk for j in held]).values_list("status", "attempts")
    assert set(statuses) == {(S.QUEUED, 0)}
    task_states.resume("tests.stamp", actor="test")
    wait_until(lambda: client.llen(key) == 10, timeout=60, message="the resumed task to drain")


@pytest.mark.django_db
def test_the_purge_forgets_limit_keys_idle_for_a_day():
    from jobs.maintenance.purge import purge

    now = timezone.now()
    LimitKeyState.objects.create(
        task="tests.fair", key='"old"', last_started_at=now - timedelta(days=2)
    )
    LimitKeyState.objects.create(task="tests.fair", key='"new"', last_started_at=now)
    assert purge().limit_keys == 1
    assert list(LimitKeyState.objects.values_list("key", flat=True)) == ['"new"']


@pytest.mark.django_db
def test_the_tasks_command_lists_pauses_resumes_and_refuses_an_unknown_task(capsys):
    from django.core.management import CommandError, call_command

    call_command("tasks", "pause", "jobs.noop")
    assert task_states.paused_names() == {"jobs.noop"}
    call_command("tasks", "list")
    out = capsys.readouterr().out
    assert "jobs.noop" in out and "paused" in out
    assert "tests.limited" in out and "concurrency=2, key=tenant, key_concurrency=1" in out
    call_command("tasks", "resume", "jobs.noop")
    assert not task_states.paused_names()
    with pytest.raises(CommandError, match="no job task named 'nope'"):
        call_command("tasks", "pause", "nope")


def test_limits_and_task_pauses_work_on_the_embedded_default(tmp_path):
    env = embedded_env(tmp_path)
    env.update(CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY="1", CONVEYOR_WEBHOOK_ENDPOINT_RATE="2/h")
    manage(env, "migrate", "--noinput")
    code = (
        "from jobs import services, task_states\n"
        "from jobs.tasks import noop\n"
        "from jobs.models import Job\n"
        "jobs = services.enqueue_many('webhooks.deliver', [{'delivery_id': 0, 'endpoint_id': e}"
        " for e in (1, 1, 2, 2, 2)])\n"
        "claimed = [services.job_claim(j.pk, worker='w') is not None for j in jobs[:3]]\n"
        "Job.objects.filter(pk=jobs[2].pk).update(status='succeeded')\n"
        "claimed.append(services.job_claim(jobs[3].pk, worker='w') is not None)\n"
        "Job.objects.filter(pk=jobs[3].pk).update(status='succeeded')\n"
        "claimed.append(services.job_claim(jobs[4].pk, worker='w') is not None)\n"
        "job = services.enqueue('jobs.noop', {})\n"
        "task_states.pause('jobs.noop', actor='test')\n"
        "noop(job.pk)\n"
        "job.refresh_from_db()\n"
        "print(claimed, job.status)\n"
    )
    out = manage(env, "shell", "-c", code)
    # endpoint 1: one at a time; endpoint 2, one at a time: two starts, then its rate (2/h)
    # is used up
    assert out.stdout.strip().splitlines()[-1] == "[True, False, True, True, False] queued"


def test_a_limit_key_is_the_same_for_equal_values_and_distinct_for_long_ones():
    limit = Limit(key=("who",), key_concurrency=1)
    assert limit.key_of({"who": {"b": 1, "a": 2}}) == limit.key_of({"who": {"a": 2, "b": 1}})
    assert limit.key_of({}) == "null"
    long_a, long_b = limit.key_of({"who": "x" * 300 + "a"}), limit.key_of({"who": "x" * 300 + "b"})
    assert long_a != long_b and len(long_a) == len(long_b) == 200


@pytest.mark.django_db
def test_the_sweeper_leaves_a_paused_tasks_jobs_to_its_resume():
    from jobs.maintenance.sweeper import sweep

    held = services.enqueue("jobs.noop", {})
    other = services.enqueue("tests.record", {})
    old = timezone.now() - timedelta(minutes=10)
    Job.objects.filter(pk__in=[held.pk, other.pk]).update(published_at=old, run_after=old)
    task_states.pause("jobs.noop", actor="test")
    result = sweep()
    assert result.skipped_paused == 1  # the other job was re-sent, or left to its backlog
    assert result.republished + result.skipped_backlog == 1
    assert Job.objects.get(pk=held.pk).published_at == old
