"""Every type the engine keeps in a faust table (changelog) or sends on an internal topic survives
its encode/decode unchanged: the state a restarted or rebalanced worker resumes from is the state
it left."""

from __future__ import annotations

import heapq
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.engine import (
    IdleMarker,
    NodeReport,
    NodeReportPack,
    NodeTermination,
    QuarantineRequest,
    SignalPack,
    Tick,
    Watermark,
)
from schemas.quarantine import QuarantineRecord
from streams.engine.decide import Termination
from streams.engine.job_side import JobState, Pending, _item_key
from streams.engine.node_side import NodeState, PartitionClock
from streams.engine.progress import Progress, ProgressClock
from tests.roundtrip import (
    RoundTrip,
    assert_round_trip,
    canonical,
    distinct_ints,
    evidence,
    heap_of,
    json_objects,
    json_trip,
    named_text,
    records,
)

terminations = records(Termination)
# Pending.items is keyed by the engine's own item key: from_dict rebuilds the key from the item.
pendings = records(
    Pending,
    term=terminations,
    items=st.lists(evidence(), max_size=4).map(lambda items: {_item_key(e): e for e in items}),
)
checkpoints = (
    st.none()
    | st.fixed_dictionaries(
        {
            "step": distinct_ints(1),
            "uri": named_text("uri"),
            "ts_ms": distinct_ints(2),
            "attempt": distinct_ints(3),
        }
    )
    | json_objects
)

# type -> how it is persisted. A type with `to_dict` under streams/ must be listed here (or in
# WRITE_ONLY with the reason it is never decoded): see test_every_persisted_type_has_a_case.
ROUNDTRIP_CASES: dict[type[Any], RoundTrip] = {
    # faust tables (changelog topics node-states, clocks, job-states, job-progress, progress-clocks)
    NodeState: RoundTrip(records(NodeState), NodeState.to_dict, NodeState.from_dict),
    PartitionClock: RoundTrip(
        records(
            PartitionClock,
            closing=heap_of(
                st.tuples(distinct_ints(1), named_text("node"), named_text("job"), distinct_ints(2))
            ),
        ),
        PartitionClock.to_dict,
        PartitionClock.from_dict,
    ),
    JobState: RoundTrip(
        records(JobState, pending=st.dictionaries(distinct_ints(0), pendings, max_size=3)),
        JobState.to_dict,
        JobState.from_dict,
    ),
    Pending: RoundTrip(pendings, Pending.to_dict, Pending.from_dict),
    Termination: RoundTrip(terminations, Termination.to_dict, Termination.from_dict),
    Progress: RoundTrip(
        records(Progress, checkpoint=checkpoints), Progress.to_dict, Progress.from_dict
    ),
    ProgressClock: RoundTrip(
        records(ProgressClock, deadlines=heap_of(st.tuples(distinct_ints(1), named_text("job")))),
        ProgressClock.to_dict,
        ProgressClock.from_dict,
    ),
    # internal topics: failover.term-by-node, failover.node-evidence
    NodeTermination: RoundTrip(
        records(NodeTermination), NodeTermination.to_dict, NodeTermination.from_dict
    ),
    NodeReport: RoundTrip(records(NodeReport), NodeReport.to_dict, NodeReport.from_dict),
    NodeReportPack: RoundTrip(
        records(NodeReportPack), NodeReportPack.to_dict, NodeReportPack.from_dict
    ),
    # failover.node-signals, failover.ticks, failover.quarantine-requests
    SignalPack: RoundTrip(records(SignalPack), SignalPack.to_dict, SignalPack.from_dict),
    Watermark: RoundTrip(records(Watermark), Watermark.to_dict, Watermark.from_dict),
    IdleMarker: RoundTrip(records(IdleMarker), IdleMarker.to_dict, IdleMarker.from_dict),
    Tick: RoundTrip(records(Tick), Tick.to_dict, Tick.from_dict),
    QuarantineRequest: RoundTrip(
        records(QuarantineRequest), QuarantineRequest.to_dict, QuarantineRequest.from_dict
    ),
}

WRITE_ONLY: dict[str, str] = {
    # `explain --json` and `replay --compare --json` print these for people and tools; no topic,
    # nothing decodes them (their shape is pinned by the golden files in test_explain_examples).
    "streams.explain_model.Attempt": "explain --json output, never read back",
    "streams.explain_model.Event": "explain --json output, never read back",
    "streams.explain_model.Explanation": "explain --json output, never read back",
    "streams.explain_model.Signal": "explain --json output, never read back",
    "streams.replay_compare.Change": "replay --compare --json output, never read back",
    "streams.replay_compare.Comparison": "replay --compare --json output, never read back",
}


@pytest.mark.parametrize("cls", list(ROUNDTRIP_CASES), ids=lambda c: c.__name__)
@given(data=st.data())
def test_persisted_state_round_trips(cls: type[Any], data: st.DataObject) -> None:
    case = ROUNDTRIP_CASES[cls]
    assert_round_trip(case, data.draw(case.strategy, label=cls.__name__))


@given(records(Termination))
def test_termination_fields_keep_their_names(term: Termination) -> None:
    # The swap this file was written for: attempt and ts_ms are both ints.
    restored = Termination.from_dict(json_trip(term.to_dict()))
    assert (restored.attempt, restored.ts_ms) == (term.attempt, term.ts_ms)
    assert restored.attempt != restored.ts_ms  # the strategy keeps int fields apart


@given(
    records(
        PartitionClock,
        closing=heap_of(
            st.tuples(distinct_ints(1), named_text("node"), named_text("job"), distinct_ints(2))
        ),
    )
)
def test_restored_clock_closes_windows_in_the_same_order(clock: PartitionClock) -> None:
    restored = PartitionClock.from_dict(json_trip(clock.to_dict()))
    order = [heapq.heappop(clock.closing) for _ in range(len(clock.closing))]
    assert [heapq.heappop(restored.closing) for _ in range(len(restored.closing))] == order


@given(records(QuarantineRequest, reason=st.sampled_from(["hardware", "precursor"])))
def test_quarantine_request_reads_as_record(request: QuarantineRequest) -> None:
    # The node side writes failover.quarantine-requests; the quarantine service decodes it.
    record = QuarantineRecord.from_dict(json_trip(request.to_dict()))
    assert record == QuarantineRecord(
        node=request.node,
        state="quarantined",
        reason=request.reason,
        evidence=(canonical(request.evidence),),
        job_id=request.job_id,
        ts_ms=request.ts_ms,
    )
