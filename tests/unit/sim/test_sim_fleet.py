"""The scheduler stand-in: queue order (the mission's priority rule) and placement."""

from __future__ import annotations

from producers.sim.fleet import JobQueue, place

NODES = [f"n{i}" for i in range(1, 9)]


def test_a_failover_job_goes_before_waiting_jobs_but_after_higher_priority_ones() -> None:
    q = JobQueue()
    q.push("early-low", 0, 1)
    q.push("early-high", 150, 1)  # already queued with a higher priority
    q.push("early-same", 100, 1)  # already queued with the same priority: first come
    q.push("failover", 100, 1)  # priority 0 + the requeue service's boost of 100
    q.push("late-low", 10, 1)
    assert [e.job_id for e in q.ordered()] == [
        "early-high",
        "early-same",
        "failover",
        "late-low",
        "early-low",
    ]


def test_placement_never_uses_quarantined_or_excluded_nodes() -> None:
    q = JobQueue()
    q.push("a", 100, 3, exclude=["n1", "n2"])
    q.push("b", 0, 2)
    placed = dict(place(q, NODES, quarantined=["n3", "n5"]))
    assert placed == {"a": ("n4", "n6", "n7"), "b": ("n1", "n2")}
    assert len(q) == 0


def test_a_blocked_job_holds_the_nodes_it_needs_against_jobs_behind_it() -> None:
    q = JobQueue()
    q.push("big-failover", 100, 6)
    q.push("small", 0, 2)
    q.push("tiny", 0, 1)
    # 5 free nodes: the head needs 6, so none of them may go to the jobs behind it.
    assert place(q, NODES[:5], quarantined=[]) == []
    assert [e.job_id for e in q.ordered()] == ["big-failover", "small", "tiny"]
    # 8 free: the head starts, the rest fill in.
    placed = place(q, NODES, quarantined=[])
    assert [job for job, _ in placed] == ["big-failover", "small"]
    assert [e.job_id for e in q.ordered()] == ["tiny"]


def test_queue_demand_and_membership() -> None:
    q = JobQueue()
    q.push("a", 0, 4)
    q.push("b", 0, 2)
    assert q.demand() == 6 and "a" in q and "z" not in q
    q.remove("a")
    assert q.demand() == 2 and "a" not in q
