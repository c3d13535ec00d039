"""Signal filter benchmark (not a timed test): `SignalFilter.reduce` per record, in one process.

The filter is the classifier's per-record path (BENCHMARKS.md), and whole-pipeline runs on a
shared 2-core machine move by +-50% between minutes. This one isolates it: records are built
in memory (the latency scenario's background mix, or the flood scenario's identical XIDs with
a wave), fed in batches of 5,000 as the loop does, best of N. With `--against FILE` (an older
`streams/signal_filter.py`, e.g. from `git show REV:streams/signal_filter.py > old.py`) both
run interleaved in the same process and the ratio is printed: the steady A/B.

    python -m gpufailover.bench.bench_filter --mix noise --against old.py
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import streams.signal_filter as current
from gpufailover.bench.workload import Noise, flood
from schemas.topics import TopicNames
from streams.policy import load_policy

BATCH = 5_000
PARTITIONS = 8


def records(mix: str, n: int) -> list[current.InputRecord]:
    names = TopicNames("")
    raw: list[tuple[str, bytes | None, bytes]] = []
    if mix == "noise":
        raw.extend(Noise(names).records(n))
    else:
        raw.extend((t, k, v) for t, k, v, _ in flood(names, n * 5 // 6, n // 6))
    return [
        current.InputRecord(t, zlib.crc32(k or b"") % PARTITIONS, i, k, v)
        for i, (t, k, v) in enumerate(raw)
    ]


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("signal_filter_against", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"bench_filter: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def once(module: Any, recs: list[current.InputRecord]) -> float:
    f = module.SignalFilter(load_policy(), TopicNames(""), 5_000)
    start = time.perf_counter()
    for i in range(0, len(recs), BATCH):
        f.reduce(recs[i : i + BATCH], 0)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", choices=("noise", "flood"), default="noise")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5, help="best of this many runs")
    parser.add_argument("--against", type=Path, help="another signal_filter.py to compare")
    args = parser.parse_args(argv)
    if args.against is not None and not args.against.is_file():
        parser.error(f"--against: no file {args.against}")
    recs = records(args.mix, args.records)
    modules: dict[str, Any] = {"this tree": current}
    if args.against is not None:
        modules[str(args.against)] = load(args.against)
    best = dict.fromkeys(modules, float("inf"))
    for _ in range(args.repeat):
        for label, module in modules.items():
            best[label] = min(best[label], once(module, recs))
    for label, seconds in best.items():
        print(f"{args.mix} {label}: {seconds / len(recs) * 1e6:.2f} us a record")
    if args.against is not None:
        print(f"this tree / {args.against}: {best['this tree'] / best[str(args.against)]:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
