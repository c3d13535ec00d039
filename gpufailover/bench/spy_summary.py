"""Summarise a py-spy raw (collapsed stacks) profile: where the samples are, in percent.

    python -m gpufailover.bench.spy_summary PROFILE.txt [--top 25] [--focus streams/]

Prints the share of samples per thread, per package of the innermost frame ("self"), the top
functions by self and by inclusive samples (a function counted once per sample however deep
it recurses), and, with --focus, the same restricted to frames whose file contains FOCUS.
`--group NAME=REGEX` (repeatable, first match wins, tried on "thread;frame;frame...") splits
the samples into named buckets, e.g. `--group idle=EpollSelector.select`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

# `--preset classifier`: buckets for the faust classifier's profiles (BENCHMARKS.md)
CLASSIFIER_GROUPS = (
    ("idle (epoll wait)", r"EpollSelector\.select"),
    ("consumer thread (aiokafka fetch under faust)", r"^thread \(\d+\): Thread-1"),
    # Before the faust buckets: the filter runs as a faust app task, under faust/mode frames.
    ("signal filter (SignalLoop/SignalFilter: batches)", r"SignalLoop\.|SignalFilter\."),
    ("metrics (prometheus_client, streams/metrics.py)", r"prometheus_client|streams/metrics\.py"),
    (
        "table writes (CodecTable/faust Table set, to_dict)",
        r"CodecTable\.__setitem__|Table\.__setitem__|\.to_dict|Collection\.|ChangeloggedObject",
    ),
    (
        "producing (faust/aiokafka producer, socket writes)",
        r"Sender\.|AIOKafkaClient\.send|Producer\.send|ProducerBuffer|MessageAccumulator"
        r"|AIOKafkaProducer|publish_message|_SelectorSocketTransport\.write"
        r"|Outputs\.send ",
    ),
    ("decode + engine (NodeGlue/JobGlue)", r"NodeGlue\.|JobGlue\."),
    (
        "per-record code in AgentDriver (bookkeeping)",
        r"AgentDriver\.|AgentProgress\.|TopicLabels\.",
    ),
    ("faust/mode per-record machinery", r"faust/|mode/"),
)
PRESETS = {"classifier": CLASSIFIER_GROUPS}
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?):(?P<line>\d+)\)$")


def parse(path: Path) -> list[tuple[str, list[str], int]]:
    """(thread, frames outermost first, samples) per distinct stack."""
    stacks = []
    for raw in path.read_text(errors="replace").splitlines():
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = frames[0] if frames[0].startswith(("thread", "process")) else "?"
        if thread != "?":
            frames = frames[1:]
        stacks.append((thread, frames, int(count)))
    return stacks


def where(frame: str) -> tuple[str, str]:
    """(function with file, package) of a frame."""
    m = _FRAME.match(frame)
    if m is None:
        return frame, frame
    file = m["file"]
    package = file.split("/")[0] if "/" in file else file
    return f"{m['func']} ({file})", package


def summarise(
    path: Path, top: int, focus: str | None, groups: Sequence[tuple[str, re.Pattern[str]]] = ()
) -> str:
    stacks = parse(path)
    total = sum(n for _, _, n in stacks)
    if not total:
        return f"{path}: no samples"
    threads: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    focus_self: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    for thread, frames, n in stacks:
        if groups:
            text = ";".join([thread, *frames])
            other = "other (asyncio task steps, futures: mostly faust's per-record hops)"
            buckets[next((g for g, rx in groups if rx.search(text)), other)] += n
        threads[re.sub(r"\(\d+\)|0x[0-9a-f]+", "", thread).strip()] += n
        if not frames:
            continue
        leaf, package = where(frames[-1])
        packages[package] += n
        self_[leaf] += n
        for func in {where(f)[0] for f in frames}:
            inclusive[func] += n
        if focus is not None:
            ours = [f for f in frames if focus in f]
            if ours:
                focus_self[where(ours[-1])[0]] += n

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    out = [f"{path}: {total} samples"]
    if groups:
        out.append("groups (first match wins):")
        out += [f"  {pct(n)}  {g}" for g, n in buckets.most_common()]
    out.append("threads:")
    out += [f"  {pct(n)}  {t}" for t, n in threads.most_common()]
    out.append("innermost frame's package (self):")
    out += [f"  {pct(n)}  {p}" for p, n in packages.most_common(top)]
    out.append(f"top {top} functions, self:")
    out += [f"  {pct(n)}  {f}" for f, n in self_.most_common(top)]
    out.append(f"top {top} functions, inclusive:")
    out += [f"  {pct(n)}  {f}" for f, n in inclusive.most_common(top)]
    if focus is not None:
        share = sum(focus_self.values())
        out.append(f"samples under a frame in {focus!r}: {pct(share)}; by innermost such frame:")
        out += [f"  {pct(n)}  {f}" for f, n in focus_self.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("profile", type=Path, nargs="+")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--focus", help="also attribute samples to the innermost frame matching this")
    p.add_argument("--group", action="append", default=[], metavar="NAME=REGEX")
    p.add_argument("--preset", choices=sorted(PRESETS), help="predefined --group buckets")
    args = p.parse_args(argv)
    pairs = [tuple(g.split("=", 1)) for g in args.group]
    pairs += list(PRESETS[args.preset]) if args.preset else []
    groups = [(name, re.compile(rx)) for name, rx in pairs]
    for path in args.profile:
        print(summarise(path, args.top, args.focus, groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
