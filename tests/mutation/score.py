"""Per-file mutation score from `mutmut results --all true` on stdin.

score = killed / (all mutants - skipped - equivalent), where killed counts mutants a test failed
or timed out on; survivors, mutants no test reaches ("no tests") and untested ones count against
it. Equivalent mutants (the program behaves the same: no test can kill them) are listed, each with
the reason, in tests/mutation/equivalent.txt; `raw` is the score with them counted as survivors.
Exit status 1 when a file is below MIN_SCORE.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

MIN_SCORE = 95.0
KILLED = frozenset({"killed", "timeout", "caught by type check"})
# `streams.engine.decide.x_decide__mutmut_3` or `...logic.xǁClassǁmethod__mutmut_3`
EQUIVALENT_FILE = Path(__file__).with_name("equivalent.txt")
NAME = re.compile(r"^\s*(?P<module>[\w.]+?)\.x[_ǁ].*__mutmut_\d+: (?P<status>.+)$")


def equivalent_mutants() -> dict[str, str]:
    """mutant name -> why it is equivalent, from EQUIVALENT_FILE (`name  # reason` lines)."""
    out = {}
    for line in EQUIVALENT_FILE.read_text().splitlines():
        name, _, reason = line.partition("#")
        if name.strip():
            out[name.strip()] = reason.strip()
    return out


def pending(files: list[str]) -> int:
    """Print the mutants of `files` that have no result or were not killed: what to (re)test."""
    modules = {path.removesuffix(".py").replace("/", ".") for path in files}
    equivalent = equivalent_mutants()
    for line in sys.stdin:
        m = NAME.match(line.rstrip("\n"))
        if m is None or m["module"] not in modules:
            continue
        name, status = line.split(":")[0].strip(), m["status"].strip()
        if name not in equivalent and status not in KILLED and status != "skipped":
            print(name)
    return 0


def main(files: list[str]) -> int:
    equivalent = equivalent_mutants()
    stale: list[str] = []
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for line in sys.stdin:
        m = NAME.match(line.rstrip("\n"))
        if m is None:
            continue
        module, status = m["module"], m["status"].strip()
        name = line.split(":")[0].strip()
        if name in equivalent:
            if status in KILLED:
                stale.append(name)  # a test kills it: it was not equivalent after all
            else:
                status = "equivalent"
        by_module[module][status] += 1
        if status not in KILLED and status not in ("skipped", "equivalent"):
            survivors[module].append(line.strip())
    failed = False
    header = ("file", "mutants", "equiv", "killed", "other", "score", "raw")
    print("{:<32} {:>7} {:>5} {:>6} {:>5} {:>7} {:>7}".format(*header))
    for path in files:
        module = path.removesuffix(".py").replace("/", ".")
        counts = by_module.get(module, Counter())
        total = sum(counts.values()) - counts["skipped"]
        equiv = counts["equivalent"]
        killed = sum(counts[s] for s in KILLED)
        score = 100.0 * killed / (total - equiv) if total > equiv else 100.0
        raw = 100.0 * killed / total if total else 100.0
        failed |= score < MIN_SCORE
        print(
            f"{path:<32} {total:>7} {equiv:>5} {killed:>6} {total - equiv - killed:>5}"
            f" {score:>6.1f}% {raw:>6.1f}%"
        )
    for path in files:
        module = path.removesuffix(".py").replace("/", ".")
        for line in survivors.get(module, []):
            print(f"  not killed: {line}")
    for name in stale:
        print(f"  listed as equivalent but killed (remove it from {EQUIVALENT_FILE.name}): {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pending"]:
        sys.exit(pending(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
