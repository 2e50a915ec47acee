"""How many objects a big workflow is built of: enqueueing a 10,000-member group must not set
Python's garbage collector off (tens of milliseconds for a web process's objects) more
often than ``enqueue_many`` of as many jobs does."""

import gc

from jobs import workflows
from jobs.workflows.build import Graph

MEMBERS = 2000


def _kept_alive(build) -> int:
    """Objects the collector tracks that ``build()``'s answer keeps alive."""
    gc.collect()
    before = len(gc.get_objects())
    kept = build()
    gc.collect()
    after = len(gc.get_objects())
    assert kept is not None
    return after - before


def test_a_group_member_is_two_objects_for_the_collector_beside_its_payload():
    members = [("tests.wf.add", {"n": n}) for n in range(MEMBERS)]

    def built():
        graph = Graph()
        workflows.chord(members, ("tests.wf.collect", {})).place(graph, [], None)
        return graph, graph._resolve()

    per_member = _kept_alive(built) / MEMBERS
    # A step and its node, and a share of the graph's own lists and maps: no options dict,
    # no list of dependencies of its own (it has none). Copies of those made it four.
    assert per_member < 3, per_member
