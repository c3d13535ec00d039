"""`python -m tests.fuzz [--records N] [--seed S] [--target T ...]`: the fuzz suite at full size.

Prints one row per target (records, dead-lettered, crashes, wrong, time, chunk rates) and the
process's max RSS; exits 1 on any crash or wrong answer. RELIABILITY.md has a run's numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tests.fuzz.harness import TARGETS, max_rss_mb, run_all


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument(
        "--records",
        type=int,
        default=int(os.environ.get("GPUFAILOVER_FUZZ_RECORDS", "100000")),
        help="mutated records per input topic and target (env GPUFAILOVER_FUZZ_RECORDS, "
        "default 100000)",
    )
    p.add_argument("--seed", type=int, default=int(os.environ.get("GPUFAILOVER_FUZZ_SEED", "1")))
    p.add_argument("--target", action="append", choices=sorted(TARGETS))
    args = p.parse_args(argv)
    started = time.perf_counter()
    results = run_all(args.records, args.seed, args.target or list(TARGETS))
    for r in results:
        print(r.row())
        for kind, n in sorted(r.kinds.items()):
            print(f"    dead letters {kind}: {n:,}")
        for example in r.examples:
            print(f"    ! {example[:300]}")
    total = sum(r.records for r in results)
    print(
        f"total {total:,} records, {sum(r.dead_lettered for r in results):,} dead-lettered, "
        f"crashes {sum(r.crashes for r in results)}, wrong {sum(r.wrong for r in results)}, "
        f"{time.perf_counter() - started:.1f} s, max RSS {max_rss_mb():.0f} MB (seed {args.seed})"
    )
    return 0 if all(r.crashes == 0 and r.wrong == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
