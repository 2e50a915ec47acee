"""A chunk's edge mark and its "ready?" question reach each row by its key, whatever the
tables' statistics say (jobs.workflows.release): a worker's connection keeps the generic
plan it made first, and one made while the tables were small or just truncated walked every
finished job, or every edge of the callback, for each chunk that ended — a cost that grew
with the group, paid by each of its chunks.

The plans before, on these tables: the mark found the chunk's ended jobs with ``Bitmap Index
Scan on job_status_idx`` (every finished job, the ids a filter); the question found the
dependants with ``Index Scan using job_status_idx`` on ``status = 'waiting'`` (every waiting
job) and the edges with ``Bitmap Index Scan on job_dep_dependant_idx`` (every edge of the
callback, the chunk's ids a filter). Wiping the statistics, as the claim's plan test does,
needs the test database's owner to be a superuser (the suite's ``postgres``).
"""

import re

import pytest
from django.db import connection

from jobs import prepared, workflows
from jobs.models import Job, JobDependency, JobStatus
from jobs.workflows import release
from tests.workflows.conftest import enqueue

S = JobStatus
MEMBERS = 3000
ENDED = 1500
CHUNK = 25
# A plan's read of a table, and the condition its index was searched with.
SCAN = re.compile(
    r"(Seq Scan|(?<!Bitmap )Index Scan|Index Only Scan|Bitmap Heap Scan)(?: using \S+)? on (\S+)"
    r"(?:.*\n\s*(?:Index Cond|Recheck Cond): (.*))?"
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def half_ended_chord():
    """A chord of 3,000 members, 1,500 of them ended and their edges done, in tables the
    server holds no statistics for; the next chunk's members end now. Answers their ids."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    flow = enqueue(
        workflows.chord(
            [("tests.wf.add", {"n": n}) for n in range(MEMBERS)], ("tests.wf.collect", {})
        )
    )
    queued = Job.objects.filter(workflow=flow, status=S.QUEUED).order_by("id")
    members = list(queued.values_list("id", flat=True))
    ended = members[: ENDED + CHUNK]
    Job.objects.filter(pk__in=ended).update(status=S.SUCCEEDED)
    JobDependency.objects.filter(dependency__in=ended[:ENDED]).update(done=True)
    with connection.cursor() as cursor:
        for table in ("jobs_job", "jobs_jobdependency"):
            cursor.execute("DELETE FROM pg_statistic WHERE starelid = %s::regclass", [table])
            cursor.execute(
                "UPDATE pg_class SET reltuples = -1 WHERE oid IN (SELECT %s::regclass UNION "
                "SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass)",
                [table, table],
            )
    connection.close()  # a new connection: nothing prepared, no plan cached
    yield ended[ENDED:]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_jobdependency")
    connection.close()


def generic_plan(sql: str, params: list) -> tuple[str, dict[str, list[str]]]:
    """Prepare ``sql`` as a worker's connection does, then the plan the server cached for
    it: its text, and the index condition of each read of each table ("" for none)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (COSTS OFF) {prepared.inline(sql)}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "EXECUTE conveyor_" in prepared.inline(sql)  # the prepared, generic plan
    reads: dict[str, list[str]] = {}
    for _, table, condition in SCAN.findall(plan):
        reads.setdefault(table, []).append(condition)
    return plan, reads


def test_a_chunks_edge_mark_and_lock_probe_each_row_by_its_key(half_ended_chord):
    plan, reads = generic_plan(release._MARK_ENDED_AND_LOCK, [half_ended_chord])
    assert set(reads) == {"jobs_job", "jobs_jobdependency"}, plan
    # the ended jobs' status and the dependants' locks, by id; the edges, by their job or id
    assert all(c.startswith("(id = ") for c in reads["jobs_job"]), plan
    assert all(
        c.startswith(("(dependency_id = ", "(id = ")) for c in reads["jobs_jobdependency"]
    ), plan


def test_the_ready_question_finds_the_dependants_by_key(half_ended_chord):
    plan, reads = generic_plan(release._READY, [half_ended_chord, S.WAITING])
    # each dependant by its id (with its status, where the index holds both)
    assert len(reads["jobs_job"]) == 1 and "(id = " in reads["jobs_job"][0], plan
    assert "(dependency_id = ended.id)" in reads["jobs_jobdependency"], plan
    assert "Seq Scan" not in plan and " Hash " not in plan, plan  # no table read whole


def test_the_statements_still_mark_lock_and_release_as_before(half_ended_chord):
    """The same statements, run: the chunk's edges done, the callback locked and not yet
    ready; with every member ended, ready."""
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute(release._MARK_ENDED_AND_LOCK, [half_ended_chord])
        (locked,) = cursor.fetchall()
        cursor.execute(release._READY, [half_ended_chord, S.WAITING])
        assert cursor.fetchall() == []
        cursor.execute("COMMIT")
    assert locked[1] == S.WAITING
    assert JobDependency.objects.filter(dependency__in=half_ended_chord, done=False).count() == 0
    rest = list(Job.objects.filter(status=S.QUEUED).values_list("id", flat=True))
    assert len(rest) == MEMBERS - ENDED - CHUNK
    Job.objects.filter(pk__in=rest).update(status=S.SUCCEEDED)
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute(release._MARK_ENDED_AND_LOCK, [rest])
        assert cursor.fetchall() == [locked]
        cursor.execute(release._READY, [rest, S.WAITING])
        assert [row[0] for row in cursor.fetchall()] == [locked[0]]
        cursor.execute("ROLLBACK")
