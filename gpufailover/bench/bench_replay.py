"""Replay throughput benchmark (not a timed test).

Generates N mixed records (mostly `gpu.health`, some `gpu.xid`, one `jobs.events` termination per
thousand records; fixed seed) into a temporary JSONL file, then measures in the same run:

  (a) parsing every line with orjson alone, and
  (b) the full replay engine (`streams.replay.Replayer`) over the same lines, output discarded,

and prints records/s for each and the ratio (b)/(a). Target: >= 100,000 records/s and a ratio
>= 0.3 on one core (issue 18). (a) then (b) run `--repeat` times; the ratio is the median of
the passes' own ratios (each pass's two halves run back to back): on a shared machine a single
pass read 0.26-0.39 for the same code within minutes.

    python -m gpufailover.bench.bench_replay --records 1000000
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from schemas.topics import Topic
from streams.policy import load_policy
from streams.replay import Replayer

SEED = 20260315
T0_MS = 1_773_532_800_000  # 2026-03-15T00:00:00Z
STEP_MS = 10  # 100 records/s of event time: 4,096 nodes x 8 GPUs reporting every ~5 min
NODES = [f"gpu-node-{i:04d}" for i in range(1, 4097)]
GPUS_PER_NODE = 8
NODES_PER_JOB = 8
# Health conditions as a fleet reports them: almost all `ok`, some throttling, rare precursors and
# rarer hardware faults (one in 20,000 health records).
CONDITIONS = ["ok"] * 17_000 + ["throttle"] * 2_996 + ["ecc_correctable_rate"] * 2
CONDITIONS += ["row_remap_pending", "thermal"]
# XIDs: mostly noise and application faults, about 0.1% hardware, some codes the policy lacks.
XIDS = [45] * 6000 + [13] * 1000 + [31] * 2000 + [43] * 500 + [63] * 5 + [999] * 300
XIDS += [48, 79, 94, 95, 119, 120, 64, 74, 92, 62]
REASONS = [None, None, "OOMKilled", "NCCLTimeout", "Hang", "WorkerLost", "Error"]
HW_CAUSES = [79, 79, 48, 94, 95, 119, 64]
HW_CAUSED_SHARE = 0.4  # terminations preceded by a hardware XID on one of the job's nodes


def generate(path: Path, n: int, seed: int = SEED) -> None:
    """Write `n` records to `path` as replay JSONL, deterministically for a given seed."""
    rng = random.Random(seed)
    jobs = 0
    next_nodes = rng.sample(NODES, NODES_PER_JOB)
    with path.open("wb") as out:
        for i in range(n):
            ts = T0_MS + i * STEP_MS
            phase = i % 1000
            rec: dict[str, object]
            if phase == 999:
                jobs += 1
                value: dict[str, object] = {
                    "job_id": f"job-{jobs:06d}",
                    "attempt": rng.choice((0, 0, 0, 1, 2, 3)),
                    "type": "terminated",
                    "ts_ms": ts,
                    "nodes": next_nodes,
                    "exit_code": 1,
                }
                reason = rng.choice(REASONS)
                if reason is not None:
                    value["reason"] = reason
                rec = {"topic": Topic.JOBS_EVENTS, "key": value["job_id"], "value": value}
                next_nodes = rng.sample(NODES, NODES_PER_JOB)
            elif phase == 998 and rng.random() < HW_CAUSED_SHARE:
                node = rng.choice(next_nodes)
                rec = _xid(rng, node, rng.choice(HW_CAUSES), ts)
            elif rng.random() < 0.02:
                rec = _xid(rng, rng.choice(NODES), rng.choice(XIDS), ts)
            else:
                node = rng.choice(NODES)
                value = {
                    "node": node,
                    "ts_ms": ts,
                    "condition": rng.choice(CONDITIONS),
                    "gpu_index": rng.randrange(GPUS_PER_NODE),
                    "severity": "info",
                    "metrics": {"temp_c": rng.randrange(40, 85), "power_w": rng.randrange(90, 700)},
                }
                rec = {"topic": Topic.GPU_HEALTH, "key": node, "value": value}
            out.write(orjson.dumps(rec))
            out.write(b"\n")


def _xid(rng: random.Random, node: str, code: int, ts: int) -> dict[str, object]:
    value = {
        "node": node,
        "xid": code,
        "ts_ms": ts,
        "gpu_index": rng.randrange(GPUS_PER_NODE),
        "source": "nvml",
        "message": f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, simulated",
    }
    return {"topic": Topic.GPU_XID, "key": node, "value": value}


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from f


def bench_orjson(path: Path) -> tuple[int, float]:
    loads = orjson.loads
    n = 0
    start = time.perf_counter()
    for line in _lines(path):
        loads(line)
        n += 1
    return n, time.perf_counter() - start


def bench_replay(path: Path) -> tuple[int, float, Replayer]:
    replayer = Replayer(load_policy())
    start = time.perf_counter()
    for _ in replayer.run(_lines(path)):
        pass
    return replayer.stats.records, time.perf_counter() - start, replayer


@dataclass
class Comparison:
    """(a) then (b) over the same file, `repeat` passes: each side's median time, and the
    median of the passes' own ratios."""

    records: int
    orjson_s: float
    replay_s: float
    ratios: list[float]  # each pass's replay rate / parse-only rate
    replayer: Replayer

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


def compare(path: Path, repeat: int) -> Comparison:
    json_s: list[float] = []
    replay_s: list[float] = []
    for _ in range(max(1, repeat)):
        n, s_json = bench_orjson(path)
        n_replay, s_replay, replayer = bench_replay(path)
        if n != n_replay:
            raise RuntimeError(f"parsed {n:,} records but replayed {n_replay:,}")
        json_s.append(s_json)
        replay_s.append(s_replay)
    ratios = [j / r for j, r in zip(json_s, replay_s, strict=True)]
    return Comparison(n, statistics.median(json_s), statistics.median(replay_s), ratios, replayer)


def _row(label: str, n: int, seconds: float) -> str:
    return f"{label:<19} {n:>10,} records in {seconds:6.2f} s = {n / seconds:12,.0f} records/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to generate")
    parser.add_argument("--seed", type=int, default=SEED, help="generator seed")
    parser.add_argument("--keep", metavar="FILE", help="also keep the generated JSONL at FILE")
    parser.add_argument(
        "--repeat", type=int, default=5, help="passes of both; the ratio is their median"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpufailover-bench-") as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "records.jsonl"
        t = time.perf_counter()
        generate(path, args.records, args.seed)
        size_mb = os.path.getsize(path) / 1e6
        gen_s = time.perf_counter() - t
        print(f"generated {args.records:,} records ({size_mb:.1f} MB) in {gen_s:.1f} s")

        result = compare(path, args.repeat)

    n, stats = result.records, result.replayer.stats
    print(_row("orjson parse only:", n, result.orjson_s))
    print(_row("full replay:", n, result.replay_s))
    spread = ", ".join(f"{r:.3f}" for r in result.ratios)
    best = f"median of {len(result.ratios)} passes: {spread}"
    print(f"ratio replay/orjson: {result.ratio:.3f} ({best})")
    verdicts = dict(sorted(stats.verdicts.items()))
    print(f"decisions: {sum(verdicts.values())} {verdicts}")
    print(
        f"quarantined nodes: {len(stats.quarantined)}; "
        f"dead letters: {sum(stats.dead_letters.values())}; unknown XIDs: {stats.unknown_xids}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
