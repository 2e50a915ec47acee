"""jobs.publish: how jobs become messages, and which failures it keeps to itself."""

from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from jobs.conf import SCHEDULE_HORIZON_SECONDS
from jobs.models import Job
from jobs.publish import broker_errors, messages, publish
from project.celery import app
from tests import jobtasks  # noqa: F401 - registers tests.record


def job(pk: int, task: str = "tests.record", *, due_in: float = 0, queue: str = "default") -> Job:
    return Job(pk=pk, task=task, queue=queue, run_after=timezone.now() + timedelta(seconds=due_in))


def test_due_jobs_of_a_batchable_task_share_messages_and_the_rest_go_alone(settings):
    settings.CONVEYOR_BATCH_SIZE = 3
    due = [job(pk) for pk in range(100, 164)]  # 64: at least 16 messages, 3 ids a message
    later = job(20, due_in=60)
    beyond = job(21, due_in=SCHEDULE_HORIZON_SECONDS + 60)
    found = messages([*due, later, beyond], now=timezone.now())
    batches = [ids if isinstance(ids, list) else [ids] for _, _, ids, wait in found if wait == 0]
    assert sorted(i for ids in batches for i in ids) == list(range(100, 164))
    assert {len(ids) for ids in batches} <= {1, 3} and len(batches) == 22
    [(task, queue, ids, countdown)] = [m for m in found if m[2] == 20]
    assert (task, queue) == ("tests.record", "default") and 55 < countdown <= 60
    assert all(m[2] != 21 for m in found)  # left to the sweeper


def test_a_time_limited_task_goes_one_job_per_message(settings):
    settings.CONVEYOR_BATCH_SIZE = 25
    found = messages([job(1, "webhooks.deliver"), job(2, "webhooks.deliver")])
    assert sorted(ids for _, _, ids, _ in found) == [1, 2]


def test_what_a_broker_raises_is_kept_and_a_bug_is_not():
    kept = broker_errors(app)
    assert issubclass(OperationalError, kept) and issubclass(ConnectionRefusedError, kept)
    assert not issubclass(TypeError, kept) and not issubclass(AttributeError, kept)
    broken = Job(pk=1, task="tests.record", queue="default", run_after=None)
    with pytest.raises(TypeError):  # before, a warning said "publish failed" and went on
        publish([broken])
