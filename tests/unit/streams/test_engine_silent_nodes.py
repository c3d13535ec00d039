"""The silent-node rule (docs/silent-nodes.md): a job that lost a worker on a node whose agent
had gone silent, or whose NVML calls hung, is hardware with that node as the suspect; judged on
event time, the same in replay and across partitions."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace
from importlib import resources

import orjson
import pytest
from failover_harness import GRACE, POLICY, T0, S, health, nodes, run, terminated, xid
from test_engine_completeness import Partitioned

from schemas.decisions import Decision, Evidence
from schemas.engine import NodeTermination
from schemas.health import GpuHealth
from schemas.topics import TopicNames
from schemas.xid import GpuXid
from streams.engine import liveness
from streams.engine.local import LocalPipeline
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.policy import PolicyError, load_policy, policy_from_dict
from streams.signal_filter import InputRecord, SignalFilter

A, B = nodes(2)
T = T0 + 3600 * S
BEAT = POLICY.heartbeat_interval_ms
SILENT = POLICY.silent_after_ms  # 3 missed heartbeats of 30 s


def beats(node: str, start: int, end: int, every: int = BEAT) -> list[GpuHealth]:
    """The agent's heartbeats from `start` up to and including `end`."""
    return [health(node, "heartbeat", ts, gpu=None) for ts in range(start, end + 1, every)]


def hung(node: str, ts: int) -> GpuHealth:
    return health(node, "nvml_hung", ts, gpu=None)


# -- liveness runs -----------------------------------------------------------------------------


def test_heartbeats_closer_than_the_threshold_make_one_run_and_a_gap_splits_it() -> None:
    runs: list[liveness.Run] = []
    for ts in (0, 30, 60, 200, 230):
        liveness.heard(runs, ts, ts, 90)
    assert runs == [(0, 60), (200, 230)]


def test_runs_do_not_depend_on_the_order_heartbeats_arrive_in() -> None:
    times = [0, 30, 60, 200, 230, 231, 400, 480, 600, 1000]
    expected: list[liveness.Run] = []
    for ts in times:
        liveness.heard(expected, ts, ts, 90)
    rng = random.Random(7)
    for _ in range(50):
        shuffled = times[:]
        rng.shuffle(shuffled)
        runs: list[liveness.Run] = []
        for ts in shuffled:
            liveness.heard(runs, ts, ts, 90)
        assert runs == expected


def test_a_span_bridging_two_runs_merges_them_and_a_repeat_changes_nothing() -> None:
    runs: list[liveness.Run] = [(0, 10), (200, 210)]
    assert liveness.heard(runs, 100, 120, 90)
    assert runs == [(0, 210)]
    assert not liveness.heard(runs, 50, 60, 90)
    assert runs == [(0, 210)]


@pytest.mark.parametrize(
    ("runs", "span", "expected"),
    [
        ([(90, 90)], (0, 0), [(0, 90)]),  # exactly the threshold before a run: linked
        ([(0, 0)], (90, 90), [(0, 90)]),  # and after it
        ([(91, 91)], (0, 0), [(0, 0), (91, 91)]),  # one more: a gap
        ([(0, 0)], (91, 91), [(0, 0), (91, 91)]),
    ],
)
def test_the_gap_that_links_two_heartbeats_is_at_most_the_threshold(
    runs: list[liveness.Run], span: tuple[int, int], expected: list[liveness.Run]
) -> None:
    mine = list(runs)  # the parameter is shared by every run of the test
    assert liveness.heard(mine, *span, 90)
    assert mine == expected


@pytest.mark.parametrize(
    ("horizon", "expected"),
    [
        (5, [(0, 5), (40, 50), (100, 200)]),  # ends exactly at the horizon: kept
        (6, [(40, 50), (100, 200)]),
        (50, [(40, 50), (100, 200)]),
        (51, [(100, 200)]),
        (10**6, [(100, 200)]),  # the latest always stays
    ],
)
def test_pruning_drops_every_run_that_ended_before_the_horizon(
    horizon: int, expected: list[liveness.Run]
) -> None:
    runs: list[liveness.Run] = [(0, 5), (40, 50), (100, 200)]
    assert liveness.prune(runs, horizon) is (runs != [(0, 5), (40, 50), (100, 200)])
    assert runs == expected


def test_runs_are_bounded_and_pruning_keeps_the_latest() -> None:
    runs: list[liveness.Run] = []
    for i in range(liveness.MAX_RUNS + 3):
        liveness.heard(runs, i * 1000, i * 1000, 90)
    assert len(runs) == liveness.MAX_RUNS
    assert runs[0] == (3000, 3000)
    assert liveness.prune(runs, 10**9)
    assert runs == [(10_000, 10_000)]
    assert not liveness.prune(runs, 10**9)
    assert not liveness.prune([(5, 6), (100, 200)], 5)


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (50, None),  # inside the first run
        (60 + 90, None),  # exactly the threshold after the last heartbeat: not yet
        (60 + 91, 150),  # one past it: silent since last + threshold
        (199, 150),
        (200, None),  # heard again
        (1000, 320),
        (-5, None),  # before anything was heard
    ],
)
def test_silent_since(at: int, expected: int | None) -> None:
    assert liveness.silent_since([(0, 60), (200, 230)], at, 90) == expected


def test_never_heard_is_not_silent() -> None:
    assert liveness.silent_since([], 10**6, 90) is None


# -- decisions in replay -----------------------------------------------------------------------

KILLED = T - 10 * 60 * S  # the agent's last heartbeat (SIGKILL just after)


def test_worker_lost_on_a_node_whose_agent_went_silent_is_hardware_on_that_node() -> None:
    r = run(
        *beats(A, T - 3600 * S, KILLED),
        *beats(B, T - 3600 * S, T + 3600 * S),
        terminated("job-1", [A, B], T, reason="WorkerLost"),
    )
    d = r.decision("job-1")
    assert (d.verdict, d.action, d.suspect_nodes, d.decided_ts_ms) == (
        "hardware",
        "failover",
        (A,),
        T,
    )
    (silent,) = [e for e in d.evidence if e.code == "agent_silent"]
    assert silent == Evidence(A, None, "health", "agent_silent", KILLED + SILENT, "hardware", 1, T)
    assert not any(e.code == "heartbeat" for e in d.evidence)
    assert r.quarantined_nodes() == []  # the quarantine service acts on the decision


def test_node_lost_counts_like_worker_lost() -> None:
    r = run(*beats(A, T - 3600 * S, KILLED), terminated("job-1", [A], T, reason="NodeLost"))
    assert r.decision("job-1").suspect_nodes == (A,)


@pytest.mark.parametrize("reason", ["OOMKilled", "NCCLTimeout", None])
def test_other_reasons_keep_their_verdict_and_show_the_silence_uncounted(
    reason: str | None,
) -> None:
    r = run(*beats(A, T - 3600 * S, KILLED), terminated("job-1", [A], T, reason=reason))
    d = r.decision("job-1")
    assert d.suspect_nodes == ()
    assert (
        d.verdict == {"OOMKilled": "software", "NCCLTimeout": "transient", None: "unknown"}[reason]
    )
    (silent,) = [e for e in d.evidence if e.code == "agent_silent"]
    assert silent.cls == "liveness"


def test_a_node_heard_from_at_the_termination_is_not_silent() -> None:
    r = run(*beats(A, T - 3600 * S, T + 600 * S), terminated("job-1", [A], T, reason="WorkerLost"))
    d = r.decision("job-1")
    assert (d.verdict, d.suspect_nodes, d.evidence[0].code) == ("transient", (), "WorkerLost")
    assert len(d.evidence) == 1


@pytest.mark.parametrize(("after_last", "silent"), [(SILENT, False), (SILENT + 1, True)])
def test_silence_starts_after_the_threshold(after_last: int, silent: bool) -> None:
    last = T - after_last
    r = run(*beats(A, last - 600 * S, last), terminated("job-1", [A], T, reason="WorkerLost"))
    assert (r.decision("job-1").verdict == "hardware") is silent


def test_a_node_never_heard_from_is_not_silent() -> None:
    r = run(*beats(B, T - 3600 * S, KILLED), terminated("job-1", [A], T, reason="WorkerLost"))
    assert r.decision("job-1").verdict == "transient"


def test_the_agent_coming_back_after_the_termination_does_not_undo_the_silence() -> None:
    r = run(
        *beats(A, T - 3600 * S, KILLED),
        terminated("job-1", [A], T, reason="WorkerLost"),
        *beats(A, T + 5 * S, T + 600 * S),  # rebooted, agent restarted
    )
    assert r.decision("job-1").suspect_nodes == (A,)


def test_heartbeats_read_out_of_order_give_the_same_decision() -> None:
    records = [*beats(A, T - 3600 * S, KILLED), *beats(A, T + 5 * S, T + 600 * S)]
    shuffled = records[:]
    random.Random(3).shuffle(shuffled)
    term = terminated("job-1", [A], T, reason="WorkerLost")
    assert run(*records, term).decision("job-1") == run(*shuffled, term).decision("job-1")


# -- nvml_hung ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hung_at", "verdict", "decided"),
    [
        (T - 60 * S, "hardware", T),  # hung when the worker was lost
        (T + 10 * S, "hardware", T + 10 * S),  # the watchdog fired after the loss
        (T - SILENT - 1, "transient", T + GRACE),  # long before: not counted
        (T + GRACE + 1, "transient", T + GRACE),  # after the grace: not counted
    ],
)
def test_nvml_hung_around_the_termination_is_hardware(
    hung_at: int, verdict: str, decided: int
) -> None:
    r = run(
        *beats(A, T - 3600 * S, T + 3600 * S),
        hung(A, hung_at),
        terminated("job-1", [A], T, reason="WorkerLost"),
    )
    d = r.decision("job-1")
    assert (d.verdict, d.decided_ts_ms) == (verdict, decided)
    assert d.suspect_nodes == ((A,) if verdict == "hardware" else ())
    assert r.quarantined_nodes() == []  # not a hardware signal by itself


def test_nvml_hung_keeps_the_agent_heard_from() -> None:
    """While NVML hangs the agent's heartbeat is `nvml_hung`: the node is not silent."""
    records = [*beats(A, T - 3600 * S, KILLED)]
    records += [hung(A, ts) for ts in range(KILLED + BEAT, T + 600 * S, BEAT)]
    policy = replace(POLICY, silent_conditions=frozenset({"agent_silent"}))
    d = run(*records, terminated("job-1", [A], T, reason="WorkerLost"), policy=policy).decision(
        "job-1"
    )
    assert (d.verdict, [e.code for e in d.evidence if e.node == A]) == (
        "transient",
        ["nvml_hung"],
    )


def test_the_policy_names_the_reasons_and_conditions_that_count() -> None:
    records = [*beats(A, T - 3600 * S, KILLED), terminated("job-1", [A], T, reason="WorkerLost")]
    no_reason = replace(POLICY, silent_reasons=frozenset({"NodeLost"}))
    assert run(*records, policy=no_reason).decision("job-1").verdict == "transient"
    no_condition = replace(POLICY, silent_conditions=frozenset({"nvml_hung"}))
    assert run(*records, policy=no_condition).decision("job-1").verdict == "transient"


def test_a_hardware_xid_elsewhere_still_names_the_silent_node_too() -> None:
    r = run(
        *beats(A, T - 3600 * S, KILLED),
        xid(B, 79, T - S),
        terminated("job-1", [A, B], T, reason="WorkerLost"),
    )
    assert r.decision("job-1").suspect_nodes == (A, B)


# -- partitions: the decision waits for the silent node's partition ---------------------------


def test_silence_is_judged_only_once_the_nodes_partition_is_past_the_termination() -> None:
    e = Partitioned({A: 0, B: 1})
    for rec in beats(A, T - 3600 * S, KILLED):
        e.signal(rec)
    for rec in beats(B, T - 3600 * S, T + 600 * S):
        e.signal(rec)
    e.job_event(terminated("job-1", [A, B], T, reason="WorkerLost"))
    e.drain_messages()
    assert e.decisions == []  # partition 0 has not been read past T: a heartbeat may come
    e.signal(health(A, "ok", T + 1))  # any signal of the partition past T
    e.drain_messages()
    (d,) = e.decisions
    assert (d.verdict, d.suspect_nodes, d.decided_ts_ms) == ("hardware", (A,), T)


def test_the_node_side_reports_silence_only_once_its_watermark_is_past_the_termination() -> None:
    side = NodeSide(POLICY, {}, PartitionClock())
    for rec in beats(A, T - 3600 * S, KILLED):
        side.on_signal(rec)
    side.advance(T)  # a signal stamped T may still come: not complete past T
    (first,) = side.on_termination(NodeTermination("job-1", 0, A, T))
    assert first.items == ()
    (report,) = side.advance(T + 1)
    assert report.items == (
        Evidence(A, None, "health", "agent_silent", KILLED + SILENT, "liveness", 1, T),
    )


def test_a_heartbeat_read_late_but_before_the_termination_keeps_the_node_alive() -> None:
    e = Partitioned({A: 0})
    for rec in beats(A, T - 3600 * S, KILLED):
        e.signal(rec)
    e.job_event(terminated("job-1", [A], T, reason="WorkerLost"))
    e.drain_messages()
    e.signal(health(A, "heartbeat", T - 10 * S, gpu=None))  # the agent was alive after all
    e.signal(health(A, "ok", T + GRACE + 1))
    e.drain_messages()
    (d,) = e.decisions
    assert (d.verdict, d.suspect_nodes) == ("transient", ())


def _workload(rng: random.Random) -> tuple[list[GpuXid | GpuHealth], str | None]:
    records: list[GpuXid | GpuHealth] = []
    for node in (A, B):
        start = T - rng.randint(200, 900) * S
        stop = T + rng.randint(-600, 200) * S
        resume = stop + rng.randint(0, 400) * S
        records += beats(node, start, stop) + beats(node, resume, T + 300 * S)
        if rng.random() < 0.3:
            records.append(hung(node, T + rng.randint(-200, 200) * S))
        if rng.random() < 0.2:
            records.append(xid(node, rng.choice([79, 13, 45]), T + rng.randint(-100, 100) * S))
    records.sort(key=lambda r: r.ts_ms)
    return records, rng.choice(["WorkerLost", "NodeLost", "OOMKilled", None])


def _replay(records: list[GpuXid | GpuHealth], reason: str | None) -> Decision:
    pipeline = LocalPipeline(POLICY)
    out = []
    term = terminated("job-1", [A, B], T, reason=reason)
    before = [r for r in records if r.ts_ms <= T]
    for rec in before:
        out += pipeline.feed(rec)
    out += pipeline.feed(term)
    for rec in records[len(before) :]:
        out += pipeline.feed(rec)
    out += pipeline.feed(health("end-of-input", "ok", T + 3 * 3600 * S))
    out += pipeline.finish()
    (d,) = [o for o in out if isinstance(o, Decision)]
    return d


@pytest.mark.parametrize("seed", range(150))
def test_any_interleaving_of_partitions_gives_replays_silent_node_decision(seed: int) -> None:
    rng = random.Random(seed)
    records, reason = _workload(rng)
    expected = _replay(records, reason)
    partition_of = {A: 0, B: rng.randint(0, 1)}
    e = Partitioned(partition_of)
    streams: dict[int, deque[GpuXid | GpuHealth]] = {p: deque() for p in e.sides}
    for rec in records:
        streams[partition_of[rec.node]].append(rec)
    for p, stream in streams.items():
        stream.append(health(A if p == 0 else B, "ok", T + 3 * 3600 * S))
    sent = False
    while True:
        choices: list[tuple[str, int]] = [("signal", p) for p, s in streams.items() if s]
        choices += [("node", p) for p, q in e.to_nodes.items() if q]
        choices += [("job", 0)] if e.to_job else []
        choices += [] if sent else [("event", 0)]
        if not choices:
            break
        what, p = rng.choice(choices)
        if what == "signal":
            e.signal(streams[p].popleft())
        elif what == "node":
            e.deliver_to_node(p)
        elif what == "job":
            e.deliver_to_job()
        else:
            e.job_event(terminated("job-1", [A, B], T, reason=reason))
            sent = True
    (got,) = e.decisions
    assert _key(got) == _key(expected), seed


def _key(d: Decision) -> tuple[object, ...]:
    evidence = sorted((e.node or "", str(e.code), e.ts_ms, e.cls) for e in d.evidence)
    return (d.verdict, d.suspect_nodes, d.decided_ts_ms, evidence)


# -- state and policy --------------------------------------------------------------------------


def test_heartbeats_are_kept_as_runs_in_the_node_state_and_survive_a_restart() -> None:
    r = run(*beats(A, T - 600 * S, T), finish=False)
    state = r.pipeline.node_states[A]
    assert (state.evidence, state.alive) == ([], [(T - 600 * S, T)])
    assert NodeState.from_dict(state.to_dict()) == state
    assert NodeState.from_dict({"evidence": [], "quarantined": False, "pending": []}).alive == []


def test_the_shipped_policy_has_the_silent_node_rule() -> None:
    p = load_policy()
    assert (p.heartbeat_interval_ms, p.missed_heartbeats, p.silent_after_ms) == (
        30 * S,
        3,
        90 * S,
    )
    assert p.silent_reasons == {"WorkerLost", "NodeLost"}
    assert p.silent_conditions == {"agent_silent", "nvml_hung"}
    assert {c: p.condition_class[c] for c in ("heartbeat", "nvml_hung", "agent_silent")} == {
        "heartbeat": "liveness",
        "nvml_hung": "liveness",
        "agent_silent": "liveness",
    }


def _base() -> dict[str, object]:

    raw = resources.files("streams").joinpath("data/policy.json").read_bytes()
    data: dict[str, object] = orjson.loads(raw)
    return data


def test_a_policy_without_the_silent_node_keys_gets_the_defaults() -> None:
    data = _base()
    del data["silent_node"]
    conditions = data["conditions"]
    assert isinstance(conditions, dict)
    for c in ("heartbeat", "nvml_hung", "agent_silent"):
        del conditions[c]
    p = policy_from_dict(data)
    assert (p.silent_after_ms, p.condition_class["nvml_hung"]) == (90 * S, "liveness")


def test_the_threshold_is_never_under_the_coalescing_window() -> None:
    data = _base() | {"coalesce_s": 300}
    assert policy_from_dict(data).silent_after_ms == 300 * S
    data = _base() | {"silent_node": {"heartbeat_interval_s": 1, "missed_heartbeats": 5}}
    data["coalesce_s"] = 1
    assert policy_from_dict(data).silent_after_ms == 5 * S


@pytest.mark.parametrize(
    ("condition", "cls"),
    [("heartbeat", "hardware"), ("nvml_hung", "transient"), ("ok", "liveness")],
)
def test_liveness_is_the_class_of_the_liveness_conditions_only(condition: str, cls: str) -> None:
    data = _base()
    conditions = data["conditions"]
    assert isinstance(conditions, dict)
    conditions[condition] = cls
    with pytest.raises(PolicyError, match=f"conditions.{condition}: class must be one of"):
        policy_from_dict(data)


def test_ignoring_heartbeats_turns_silence_off() -> None:
    data = _base()
    conditions = data["conditions"]
    assert isinstance(conditions, dict)
    conditions["heartbeat"] = "ignore"
    policy = policy_from_dict(data)
    records = [*beats(A, T - 3600 * S, KILLED), terminated("job-1", [A], T, reason="WorkerLost")]
    assert run(*records, policy=policy).decision("job-1").verdict == "transient"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([], "silent_node must be an object"),
        ({"interval": 3}, "unknown keys ['interval']"),
        ({"heartbeat_interval_s": 0}, "heartbeat_interval_s must be a positive integer"),
        ({"missed_heartbeats": True}, "missed_heartbeats must be a positive integer"),
        ({"reasons": "WorkerLost"}, "reasons must be a list of strings"),
        ({"conditions": [1]}, "conditions must be a list of strings"),
        (
            {"conditions": ["heartbeat"]},
            "conditions: ['heartbeat'] not among ['agent_silent', 'nvml_hung']",
        ),
    ],
)
def test_a_bad_silent_node_section_is_refused_with_its_key(section: object, message: str) -> None:
    with pytest.raises(PolicyError, match="silent_node") as err:
        policy_from_dict(_base() | {"silent_node": section})
    assert message in str(err.value)


# -- the Kafka path: signal filter folds, node side stores runs ---------------------------------


def test_the_signal_filter_forwards_heartbeats_folded_and_the_node_side_keeps_them_as_runs() -> (
    None
):
    names = TopicNames("")
    f = SignalFilter(POLICY, names, idle_after_ms=5_000)
    times = [T, T + BEAT, T + 2 * BEAT, T + 10 * BEAT]  # a gap of 8 intervals before the last
    batch = [
        InputRecord(names.gpu_health, 0, i, A.encode(), orjson.dumps(health(A, "heartbeat", ts)))
        for i, ts in enumerate(times)
    ]
    out = f.reduce(batch, wall_ms=0)
    items = [s["evidence"] for o in out for s in orjson.loads(o.value)["signals"]]
    assert [(e["code"], e["class"], e["ts_ms"], e["last_ts_ms"]) for e in items] == [
        ("heartbeat", "liveness", T, T + 2 * BEAT),
        ("heartbeat", "liveness", T + 10 * BEAT, T + 10 * BEAT),
    ]
    nodes: dict[str, NodeState] = {}
    side = NodeSide(POLICY, nodes, PartitionClock(), follow_records=False)
    for e in items:
        assert side.on_evidence(Evidence.from_dict(e)) == []
    assert (nodes[A].alive, nodes[A].evidence) == ([(T, T + 2 * BEAT), (T + 10 * BEAT,) * 2], [])


class CountingStates(dict[str, NodeState]):
    writes = 0

    def __setitem__(self, key: str, value: NodeState) -> None:
        self.writes += 1
        super().__setitem__(key, value)


def test_a_heartbeat_inside_a_known_run_does_not_write_the_node_state() -> None:

    nodes = CountingStates()
    side = NodeSide(POLICY, nodes, PartitionClock())
    side.on_signal(health(A, "heartbeat", T, gpu=None))
    side.on_signal(health(A, "heartbeat", T + BEAT, gpu=None))
    assert nodes.writes == 2
    side.on_signal(health(A, "heartbeat", T + BEAT // 2, gpu=None))  # read late, inside the run
    assert nodes.writes == 2


def test_runs_older_than_the_retention_are_pruned_but_the_latest_is_kept() -> None:
    retention = POLICY.retention_ms
    r = run(
        *beats(A, T, T + 60 * S),
        health(B, "ok", T + retention + 3600 * S),  # time moves on (another node)
        *beats(A, T + retention + 3600 * S, T + retention + 3660 * S),
        finish=False,
    )
    assert r.pipeline.node_states[A].alive == [(T + retention + 3600 * S, T + retention + 3660 * S)]
    r = run(*beats(A, T, T + 60 * S), health(B, "ok", T + 10 * retention), finish=False)
    assert r.pipeline.node_states[A].alive == [(T, T + 60 * S)]  # the only run: kept


def test_nvml_hung_is_stored_as_evidence_and_counts_as_heard() -> None:
    r = run(hung(A, T), finish=False)
    state = r.pipeline.node_states[A]
    assert state.alive == [(T, T)]
    assert [(e.code, e.cls) for e in state.evidence] == [("nvml_hung", "liveness")]
