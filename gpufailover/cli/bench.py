"""`gpufailover bench`: the pipeline benchmarks on a real broker.

The harness is the `gpufailover.bench` package; this module only parses the command line and
imports it when the command runs, so `gpufailover --help` stays light.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpufailover.bench import SCENARIOS


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="benchmark the pipeline on a real broker and print a table",
        description=(
            "Throughput (vs a bare aiokafka consumer), decision latency under load, XID floods, "
            "memory at 100k nodes, 1 vs N workers, the replay engine and a 10,000-node fleet's "
            "real input rate, measured side by side "
            "in one run. Starts a broker unless KAFKA_BOOTSTRAP or --bootstrap names one."
        ),
    )
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenario",
        nargs="*",
        default="all",
        choices=["all", *SCENARIOS],
        help="what to run (default: all)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness (< 2 min)")
    p.add_argument("--records", type=int, help="throughput/scaleout pre-load (default 300,000)")
    p.add_argument("--rate", type=float, help="latency: background records/s (default 5,000)")
    p.add_argument("--flood", type=int, help="flood: identical XIDs (default 500,000)")
    p.add_argument("--wave", type=int, help="flood: nodes in the XID wave (default 100,000)")
    p.add_argument(
        "--nodes",
        type=int,
        help="memory, scaleout: nodes with evidence (default 100,000)",
    )
    p.add_argument(
        "--fleet-nodes",
        type=int,
        help="realistic: nodes of the fleet whose input rate is sent (default 10,000)",
    )
    p.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    p.add_argument(
        "--workers",
        dest="scaleout_workers",
        type=_worker_counts,
        metavar="N[,N...]",
        help="scaleout: worker counts compared with 1 worker (default 2), e.g. 2,3",
    )
    p.add_argument("--bootstrap", help="broker to use (default: KAFKA_BOOTSTRAP, else start one)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the rows here as JSON")
    p.add_argument(
        "--classifier-env",
        action="append",
        metavar="KEY=VALUE",
        help="environment of the classifier processes, e.g. a faust setting to try "
        "(PRODUCER_LINGER=0.005, STREAM_BUFFER_MAXSIZE=256); repeatable",
    )
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record the classifier with py-spy into DIR (collapsed stacks per scenario)",
    )


def _worker_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected worker counts like 2,3, got {text!r}") from None
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError("worker counts must be 2 or more")
    return counts


def run(args: argparse.Namespace) -> int:
    from gpufailover.bench import pipeline

    code: int = pipeline.run_from_args(args)
    return code
