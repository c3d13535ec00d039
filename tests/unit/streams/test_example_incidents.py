"""Every bundled incident in examples/ replays to what its `<name>.expected.json` says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.policy import load_policy
from streams.replay import Replayer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DUMPS = sorted(EXAMPLES.glob("*.jsonl"))
DECISION_KEYS = ("job_id", "attempt", "verdict", "action", "status", "suspect_nodes")
DECISION_KEYS += ("next_attempt",)


def replay_in_process(dump: Path) -> tuple[list[dict[str, Any]], Replayer]:
    replayer = Replayer(load_policy())
    out = [orjson.loads(raw) for raw in replayer.run(dump.read_bytes().splitlines(keepends=True))]
    return out, replayer


def summary(out: list[dict[str, Any]], replayer: Replayer) -> dict[str, Any]:
    decisions = []
    for rec in out:
        if rec["topic"] == "failover.decisions":
            v = rec["value"]
            evidence = [[e["node"], e["code"], e["count"]] for e in v["evidence"]]
            decisions.append({k: v[k] for k in DECISION_KEYS} | {"evidence": evidence})
    return {
        "decisions": decisions,
        "quarantined": [r["value"]["node"] for r in out if r["topic"] == "nodes.quarantine"],
        "dead_letters": dict(replayer.stats.dead_letters),
    }


def test_there_are_four_to_six_examples_each_with_expectations_and_a_readme_entry() -> None:
    assert 4 <= len(DUMPS) <= 6
    readme = (EXAMPLES / "README.md").read_text()
    for dump in DUMPS:
        assert dump.with_suffix(".expected.json").is_file(), dump.name
        assert f"`{dump.name}`" in readme, dump.name


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_example_replays_to_its_expected_decisions(dump: Path) -> None:
    expected = orjson.loads(dump.with_suffix(".expected.json").read_bytes())
    out, replayer = replay_in_process(dump)
    assert summary(out, replayer) == expected


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_example_records_use_2026_epoch_ms_and_gpu_node_names(dump: Path) -> None:
    start_2026, start_2027 = 1_767_225_600_000, 1_798_761_600_000
    for raw in dump.read_bytes().splitlines():
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # the deliberately broken lines of flood-and-garbage
        value = rec.get("value")
        if not isinstance(value, dict) or not isinstance(value.get("ts_ms"), int):
            continue
        assert start_2026 <= value["ts_ms"] < start_2027, raw
        for node in [value.get("node"), *value.get("nodes", [])]:
            assert node is None or node.startswith("gpu-node-"), raw


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_example_replays_the_same_through_the_command(dump: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpufailover", "replay", str(dump)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out, _ = replay_in_process(dump)
    assert [orjson.loads(raw) for raw in proc.stdout.splitlines()] == out


def test_flood_example_coalesces_the_flood_into_one_item() -> None:
    out, _ = replay_in_process(EXAMPLES / "flood-and-garbage.jsonl")
    (decision,) = [r["value"] for r in out if r["topic"] == "failover.decisions"]
    (item,) = decision["evidence"]
    assert (item["node"], item["code"], item["count"]) == ("gpu-node-212", 31, 1000)


def test_late_xid_example_is_decided_when_the_late_xid_arrives() -> None:
    out, _ = replay_in_process(EXAMPLES / "late-xid.jsonl")
    first = next(r["value"] for r in out if r["topic"] == "failover.decisions")
    assert first["decided_ts_ms"] - first["terminated_ts_ms"] == 60_004
    quarantines = {
        r["value"]["node"]: r["value"]["job_id"] for r in out if "quarantine" in r["topic"]
    }
    assert quarantines == {"gpu-node-044": "llm-pretrain-70b-0315", "gpu-node-051": None}
