"""Per-file mutation score from `mutmut results --all true` on stdin.

score = killed / (all mutants - skipped), where killed counts mutants a test failed on or timed
out on; survivors, mutants no test reaches ("no tests") and untested ones count against it.
Exit status 1 when a file is below MIN_SCORE.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

MIN_SCORE = 95.0
KILLED = frozenset({"killed", "timeout", "caught by type check"})
# `streams.engine.decide.x_decide__mutmut_3` or `...logic.xǁClassǁmethod__mutmut_3`
NAME = re.compile(r"^\s*(?P<module>[\w.]+?)\.x[_ǁ].*__mutmut_\d+: (?P<status>.+)$")


def main(files: list[str]) -> int:
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for line in sys.stdin:
        m = NAME.match(line.rstrip("\n"))
        if m is None:
            continue
        module, status = m["module"], m["status"].strip()
        by_module[module][status] += 1
        if status not in KILLED and status != "skipped":
            survivors[module].append(line.strip())
    failed = False
    print(f"{'file':<34} {'mutants':>7} {'killed':>6} {'other':>5} {'score':>7}")
    for path in files:
        module = path.removesuffix(".py").replace("/", ".")
        counts = by_module.get(module, Counter())
        total = sum(counts.values()) - counts["skipped"]
        killed = sum(counts[s] for s in KILLED)
        score = 100.0 * killed / total if total else 100.0
        failed |= score < MIN_SCORE
        print(f"{path:<34} {total:>7} {killed:>6} {total - killed:>5} {score:>6.1f}%")
    for path in files:
        module = path.removesuffix(".py").replace("/", ".")
        for line in survivors.get(module, []):
            print(f"  not killed: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
