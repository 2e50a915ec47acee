"""An IntegrityError is mapped by the constraint it names, and any other one propagates."""

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import UNIQUE_CONSTRAINT, Job
from project.access.idempotency import _reserve
from project.access.models import ApiToken, IdempotencyKey
from project.access.tokens import token_create
from project.constraints import violates


def _job(**fields) -> Job:
    now = timezone.now()
    return Job.objects.create(
        task="tests.noop", run_after=now, created_at=now, updated_at=now, **fields
    )


def _violation(**fields) -> IntegrityError:
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        _job(**fields)
    return caught.value


@pytest.mark.django_db
def test_postgresql_names_the_constraint_that_was_broken():
    _job(idempotency_key="k1")
    duplicate = _violation(idempotency_key="k1")
    assert violates(duplicate, Job, "job_idempotency_key_unique")
    assert not violates(duplicate, Job, UNIQUE_CONSTRAINT)
    bad_status = _violation(status="nonsense")
    assert not violates(bad_status, Job, "job_idempotency_key_unique")
    with pytest.raises(LookupError, match="no constraint 'nope'"):
        violates(duplicate, Job, "nope")


def test_sqlite_messages_are_matched_by_the_constraints_columns():
    """SQLite names columns, not constraints: the message is matched to the declared fields."""
    on_key = IntegrityError("UNIQUE constraint failed: jobs_job.idempotency_key")
    assert violates(on_key, Job, "job_idempotency_key_unique")
    assert not violates(on_key, Job, UNIQUE_CONSTRAINT)
    three = "UNIQUE constraint failed: jobs_idempotencykey.token_id, jobs_idempotencykey.path, "
    three += "jobs_idempotencykey.key"
    assert violates(IntegrityError(three), IdempotencyKey, "idempotency_key_unique")
    foreign = IntegrityError("FOREIGN KEY constraint failed")
    assert not violates(foreign, IdempotencyKey, "idempotency_key_unique")


@pytest.mark.django_db(transaction=True)
def test_an_unrelated_integrity_error_is_not_answered_as_a_contended_key():
    """A reservation for a token deleted meanwhile fails on its foreign key at commit: that
    is a bug to see, not the 409 "contended" it was answered with after three tries."""
    token, _ = token_create(name="gone", scope="deploy")
    ApiToken.objects.filter(pk=token.pk).delete()
    with pytest.raises(IntegrityError):
        _reserve(token=token, key="k", path="/api/v1/x", digest="d")
    assert not IdempotencyKey.objects.exists()
