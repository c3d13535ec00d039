"""The node nobody hears from, on the real broker (docs/silent-nodes.md).

A real agent process (`--source file:`, no GPU) sends its heartbeat on gpu.health; it is
killed with SIGKILL; a job on its node then terminates with WorkerLost. The classifier decides
hardware with that node as the suspect, and `replay` of the same topics decides the same.
"""

from __future__ import annotations

import signal
from itertools import pairwise
from pathlib import Path

import orjson

from schemas.topics import TopicNames
from streams.policy import load_policy
from streams.replay import Replayer
from tests.integration.kafka_io import (
    Rec,
    Service,
    classifier,
    produce,
    short_grace_policy,
    wait_for,
)

SILENT, ALIVE = "gpu-silent-01", "gpu-alive-02"
BEAT_S, MISSED = 1, 3  # the agent's interval and the policy's: silent after 3 s


def _beats(recs: list[Rec], names: TopicNames, node: str) -> list[Rec]:
    return [
        r
        for r in recs
        if r.topic == names.gpu_health and r.key == node and r.value["condition"] == "heartbeat"
    ]


async def test_a_worker_lost_on_a_node_whose_agent_was_killed_is_hardware_on_that_node(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n = topic_names
    policy = short_grace_policy(
        tmp_path,
        coalesce_s=1,
        silent_node={"heartbeat_interval_s": BEAT_S, "missed_heartbeats": MISSED},
    )
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    agent = Service(
        ["agent", "--source", f"file:{kernel_log}", "--node", SILENT,
         "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix, "--spool-dir", "none",
         "--heartbeat-interval", str(BEAT_S)],
        tmp_path / "agent.log",
        {},
    )  # fmt: skip
    agent.start()
    try:
        recs = await wait_for(
            kafka_bootstrap, [n.gpu_health], lambda rs: len(_beats(rs, n, SILENT)) >= 3
        )
    finally:
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGKILL)  # no shutdown, no last words
        agent.proc.wait(30)
    assert agent.proc.returncode == -signal.SIGKILL, agent.log_tail()
    # Everything it managed to send before it died: its last heartbeat is where silence starts.
    recs = await wait_for(kafka_bootstrap, [n.gpu_health], lambda rs: True, settle_s=2.0)
    beats = _beats(recs, n, SILENT)
    gaps = [b.value["ts_ms"] - a.value["ts_ms"] for a, b in pairwise(beats)]
    assert all(gap < 2 * BEAT_S * 1000 for gap in gaps), gaps  # it was beating regularly
    last = max(b.value["ts_ms"] for b in beats)
    terminated = last + (BEAT_S * MISSED + 1) * 1000  # event time: 4 missed intervals later
    # The other node's agent is alive through the termination (published here directly).
    alive = [
        {"node": ALIVE, "ts_ms": t, "condition": "heartbeat"}
        for t in range(last - 5_000, terminated + 3_000, BEAT_S * 1000)
    ]
    term = {
        "job_id": "job-silent",
        "attempt": 0,
        "type": "terminated",
        "ts_ms": terminated,
        "nodes": [SILENT, ALIVE],
        "reason": "WorkerLost",
        "exit_code": 137,
    }
    await produce(
        kafka_bootstrap,
        [*((n.gpu_health, ALIVE, v) for v in alive), (n.jobs_events, "job-silent", term)],
    )
    with classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, policy):
        out = await wait_for(
            kafka_bootstrap,
            [n.failover_decisions],
            lambda rs: len(rs) >= 1,
            timeout_s=120,
            settle_s=2.0,
        )
    (decision,) = [r.value for r in out]
    assert (decision["verdict"], decision["action"], decision["suspect_nodes"]) == (
        "hardware",
        "failover",
        [SILENT],
    )
    (silent,) = [e for e in decision["evidence"] if e["code"] == "agent_silent"]
    assert (silent["node"], silent["class"], silent["ts_ms"]) == (
        SILENT,
        "hardware",
        last + BEAT_S * MISSED * 1000,
    )
    assert decision["decided_ts_ms"] == terminated

    # The same topics through replay: the same decision.
    inputs = await wait_for(
        kafka_bootstrap, [n.gpu_health, n.jobs_events], lambda rs: True, settle_s=1.0
    )
    order = sorted(inputs, key=lambda r: (r.value["ts_ms"], r.topic))
    lines = [
        orjson.dumps({"topic": r.topic.removeprefix(n.prefix), "key": r.key, "value": r.value})
        for r in order
    ]
    replayer = Replayer(load_policy(policy), now_ms=terminated + 60_000)
    replayed = [orjson.loads(line)["value"] for line in replayer.run(lines)]
    (expected,) = [v for v in replayed if "verdict" in v]
    assert {k: expected[k] for k in ("verdict", "suspect_nodes", "decided_ts_ms", "evidence")} == {
        k: decision[k] for k in ("verdict", "suspect_nodes", "decided_ts_ms", "evidence")
    }
