"""`gpufailover explain` of every job of every bundled incident (examples/), text and JSON,
checked against the files in explain_golden/ (regenerate after a deliberate change with
GPUFAILOVER_UPDATE_GOLDEN=1 and read the diff), plus what each example is about."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.explain import Explanation, explain
from streams.explain_dump import records_from_dump
from streams.explain_render import to_json, to_text
from streams.policy import load_policy

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GOLDEN = Path(__file__).resolve().parent / "explain_golden"
DUMPS = sorted(EXAMPLES.glob("*.jsonl"))
NOW_MS = 1_800_000_000_000  # after every example: the future bound refuses none of them
UPDATE = os.environ.get("GPUFAILOVER_UPDATE_GOLDEN") == "1"


def explanations(dump: Path) -> list[Explanation]:
    policy = load_policy()
    records = records_from_dump(dump.read_bytes().splitlines(), policy, NOW_MS)
    jobs = sorted({r.key for r in records if r.topic == "failover.decisions" and r.key is not None})
    out = [explain(job, records, policy) for job in jobs]
    assert all(x is not None for x in out)
    return [x for x in out if x is not None]


def check_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} differs; see the module docstring"


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_explain_text_of_example_matches_golden(dump: Path) -> None:
    text = "\n\n".join(to_text(x) for x in explanations(dump)) + "\n"
    check_golden(GOLDEN / f"{dump.stem}.txt", text)


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_explain_json_of_example_matches_golden(dump: Path) -> None:
    text = "[\n" + ",\n".join(to_json(x) for x in explanations(dump)) + "\n]\n"
    check_golden(GOLDEN / f"{dump.stem}.json", text)
    assert [x["job_id"] for x in orjson.loads(text)] == [x.job_id for x in explanations(dump)]


def _attempt(dump: str, job: str, attempt: int = 0) -> dict[str, object]:
    (x,) = [x for x in explanations(EXAMPLES / dump) if x.job_id == job]
    return x.to_dict()["attempts"][attempt]


def test_late_xid_outside_the_grace_is_seen_but_not_counted() -> None:
    a = _attempt("late-xid.jsonl", "llm-pretrain-13b-0315")
    assert a["decision"]["verdict"] == "transient"
    (late,) = a["not_counted"]
    assert (late["node"], late["code"], late["class"]) == ("gpu-node-051", 48, "hardware")
    assert late["why"].startswith("outside the window: 150 s after the termination")


def test_ignored_classes_are_named_on_a_hardware_decision() -> None:
    a = _attempt("nccl-timeout-cascade.jsonl", "moe-finetune-32n-0315")
    whys = {(s["kind"], s["code"]): s["why"] for s in a["not_counted"]}
    assert whys[("xid", 45)].startswith("ignored class")
    assert whys[("health", "throttle")].startswith("ignored class")
    counted = {(s["node"], s["code"]) for s in a["counted"]}
    assert counted == {("gpu-node-105", 94), (None, "NCCLTimeout")}


def test_flood_is_one_counted_item_and_bad_lines_are_reported() -> None:
    (x,) = explanations(EXAMPLES / "flood-and-garbage.jsonl")
    (item,) = x.attempts[0].counted
    assert (item.node, item.code, item.count) == ("gpu-node-212", 31, 1000)
    assert len(x.unreadable) == 3  # the bad xid, the bad condition, the bad termination


def test_cli_explains_from_a_dump_as_the_function_does() -> None:
    dump = EXAMPLES / "late-xid.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufailover",
            "explain",
            "llm-pretrain-70b-0315",
            "--file",
            str(dump),
            "--json",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (x,) = [x for x in explanations(dump) if x.job_id == "llm-pretrain-70b-0315"]
    assert orjson.loads(proc.stdout) == orjson.loads(to_json(x))


def test_cli_unknown_job_is_one_line_and_exit_6() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpufailover", "explain", "no-such-job", "--file", str(DUMPS[0])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 6
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("gpufailover explain: unknown job 'no-such-job'")


def test_cli_bad_since_is_usage() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufailover",
            "explain",
            "j",
            "--file",
            str(DUMPS[0]),
            "--since",
            "yesterday",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpufailover explain: --since 'yesterday': expected a duration")
