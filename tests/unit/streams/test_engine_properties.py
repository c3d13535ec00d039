"""Property tests (hypothesis) of the engine.

1. Interleaving unrelated jobs (disjoint job ids and nodes) never changes their decisions.
   The watermark is shared by all records, so "interleaving" means what a partition really does:
   each job's records arrive at most `grace` late against that job's own event time, and records
   from different jobs are merged without one job's clock running ahead of the other's (the merge
   is by each stream's running watermark; ties are broken arbitrarily by hypothesis). Within that,
   records of a job arrive in any order hypothesis likes.
2. Exactly one decision per terminated (job, attempt), whatever the duplicates and the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from failover_harness import GRACE, LOOKBACK, T0, Record, Run, S, health, job_event, terminated, xid
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.decisions import Decision
from schemas.engine import QuarantineRequest
from schemas.jobs import JobEvent

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, database=None)

XID_CODES = [79, 48, 94, 13, 31, 43, 45, 63, 999]
CONDITIONS = ["ok", "throttle", "gpu_lost", "pcie", "row_remap_pending"]
REASONS = [None, "OOMKilled", "NCCLTimeout", "Hang", "Error"]


@dataclass(frozen=True)
class Stream:
    """One job's records in arrival order."""

    job: str
    nodes: tuple[str, ...]
    records: tuple[Record, ...]


@st.composite
def job_stream(draw: st.DrawFn, index: int) -> Stream:
    job = f"job-{index}"
    job_nodes = tuple(f"gpu-node-{index}{i:02d}" for i in range(draw(st.integers(1, 3))))
    base = T0 + draw(st.integers(0, 1500)) * S
    timed: list[tuple[int, Record]] = []
    for _ in range(draw(st.integers(0, 6))):
        node = draw(st.sampled_from(job_nodes))
        ts = base + draw(st.integers(-LOOKBACK - 60 * S, GRACE + 60 * S))
        gpu = draw(st.integers(0, 1))
        if draw(st.booleans()):
            rec: Record = xid(node, draw(st.sampled_from(XID_CODES)), ts, gpu=gpu)
        else:
            rec = health(node, draw(st.sampled_from(CONDITIONS)), ts, gpu=gpu)
        timed.append((ts, rec))
    attempts = draw(st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True))
    for k, attempt in enumerate(sorted(attempts)):
        ts = base + k * 2000 * S
        term = terminated(
            job,
            job_nodes,
            ts,
            attempt=attempt,
            reason=draw(st.sampled_from(REASONS)),
            failover=draw(st.booleans()) or draw(st.booleans()),
            training_type="spot" if draw(st.integers(0, 5)) == 0 else "on_demand",
            max_failovers=draw(st.sampled_from([None, None, 0, 1, 2])),
        )
        for _ in range(draw(st.integers(1, 2))):  # sometimes delivered twice
            timed.append((ts, term))
    timed.append((base + draw(st.integers(0, GRACE)), job_event(job, "started", base)))
    # Arrival order: each record is delayed by 0..grace behind its event time.
    delayed = [(ts + draw(st.integers(0, GRACE)), i, rec) for i, (ts, rec) in enumerate(timed)]
    records = tuple(rec for _, _, rec in sorted(delayed, key=lambda d: (d[0], d[1])))
    return Stream(job, job_nodes, records)


def running_watermarks(records: tuple[Record, ...]) -> list[int]:
    out, wm = [], -(2**63)
    for rec in records:
        wm = max(wm, rec.ts_ms)
        out.append(wm)
    return out


def solo(records: tuple[Record, ...] | list[Record]) -> Run:
    r = Run()
    r.feed(*records)
    r.finish()
    return r


def decisions_by_key(decisions: list[Decision]) -> dict[tuple[str, int], Decision]:
    out: dict[tuple[str, int], Decision] = {}
    for d in decisions:
        assert (d.job_id, d.attempt) not in out, f"two decisions for {d.job_id}/{d.attempt}"
        out[(d.job_id, d.attempt)] = d
    return out


def quarantines_of_nodes(qs: list[QuarantineRequest], node_set: set[str]) -> list[Any]:
    return sorted(
        (q.node, q.reason, q.job_id, q.ts_ms, q.evidence.code, q.evidence.ts_ms)
        for q in qs
        if q.node in node_set
    )


@PROPERTY_SETTINGS
@given(data=st.data(), count=st.integers(2, 4))
def test_interleaving_unrelated_jobs_never_changes_their_decisions(
    data: st.DataObject, count: int
) -> None:
    streams = [data.draw(job_stream(i), label=f"stream {i}") for i in range(count)]
    keys = [running_watermarks(s.records) for s in streams]
    heads = [0] * count
    merged: list[Record] = []
    while any(heads[i] < len(s.records) for i, s in enumerate(streams)):
        live = [i for i, s in enumerate(streams) if heads[i] < len(s.records)]
        low = min(keys[i][heads[i]] for i in live)
        pick = data.draw(st.sampled_from([i for i in live if keys[i][heads[i]] == low]))
        merged.append(streams[pick].records[heads[pick]])
        heads[pick] += 1

    together = solo(merged)
    all_decisions = decisions_by_key(together.decisions)
    for s in streams:
        alone = solo(s.records)
        mine = {k: d for k, d in all_decisions.items() if k[0] == s.job}
        assert mine == decisions_by_key(alone.decisions)
        node_set = set(s.nodes)
        assert quarantines_of_nodes(together.quarantines, node_set) == quarantines_of_nodes(
            alone.quarantines, node_set
        )


@st.composite
def chaotic_events(draw: st.DrawFn) -> list[Record]:
    """Several jobs on shared nodes, duplicated terminations, arbitrary arrival order."""
    pool = [f"gpu-node-{i:03d}" for i in range(1, 7)]
    recs: list[Record] = []
    for j in range(draw(st.integers(1, 4))):
        job = f"job-{j}"
        for attempt in draw(st.lists(st.integers(0, 4), max_size=3, unique=True)):
            job_nodes = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
            ts = T0 + draw(st.integers(0, 3000)) * S
            reason = draw(st.sampled_from(REASONS))
            for _ in range(draw(st.integers(1, 3))):
                recs.append(
                    terminated(
                        job,
                        job_nodes,
                        ts + draw(st.integers(0, 2)) * S,
                        attempt=attempt,
                        reason=draw(st.sampled_from([reason, "WorkerLost"])),
                    )
                )
        for etype in draw(st.lists(st.sampled_from(["started", "succeeded", "cancelled"]))):
            recs.append(job_event(job, etype, T0 + draw(st.integers(0, 3000)) * S))
    for _ in range(draw(st.integers(0, 15))):
        node = draw(st.sampled_from(pool))
        ts = T0 + draw(st.integers(-600, 3600)) * S
        if draw(st.booleans()):
            recs.append(xid(node, draw(st.sampled_from(XID_CODES)), ts))
        else:
            recs.append(health(node, draw(st.sampled_from(CONDITIONS)), ts))
    return draw(st.permutations(recs))


@PROPERTY_SETTINGS
@given(records=chaotic_events())
def test_exactly_one_decision_per_terminated_job_attempt(records: list[Record]) -> None:
    r = solo(records)
    terminations = [rec for rec in records if isinstance(rec, JobEvent)]
    expected = {(e.job_id, e.attempt) for e in terminations if e.type == "terminated"}
    got = decisions_by_key(r.decisions)  # asserts no (job, attempt) twice
    assert set(got) == expected
    quarantined = set(r.quarantined_nodes())
    first_nodes: dict[tuple[str, int], set[str]] = {}
    for e in terminations:
        if e.type == "terminated":
            first_nodes.setdefault((e.job_id, e.attempt), set(e.nodes))
    for key, d in got.items():
        assert set(d.suspect_nodes) <= first_nodes[key]
        assert set(d.suspect_nodes) <= quarantined
        assert (d.verdict == "hardware") == bool(d.suspect_nodes)
