"""A real run's report input, saved: what `gpufailover demo` (seed 1, 64 nodes, 4 simulated
hours) drew its HTML report from, the summary (less the per-job and per-incident lists) and the
fleet timeline. The timeline is sampled on wall time, so its last sample falls short of the end
of the run, as in every run; one sample has one broken, unquarantined node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

DEMO_INPUT = Path(__file__).parent / "data" / "demo-seed1-report-input.json"


def demo_input() -> tuple[dict[str, Any], list[tuple[int, int, int, int, int]], int]:
    """(summary, timeline, start_ms) as `htmlreport.render` takes them."""
    d = orjson.loads(DEMO_INPUT.read_bytes())
    timeline = [(t, busy, idle, q, broken) for t, busy, idle, q, broken in d["timeline"]]
    return d["summary"], timeline, int(d["start_ms"])
