"""Label values shared by every component's metrics: bounded by construction.

A label value becomes a time series in Prometheus, so every label here maps an input onto a
small closed set. Per-node and per-job detail lives in the topics, never in metric labels.
"""

from __future__ import annotations

# XID codes in NVIDIA's catalog run 1..172 today; allow headroom for new driver releases, and
# fold anything beyond (a corrupt or hostile value) into one series.
MAX_XID_LABEL = 255
OTHER = "other"


def xid_label(code: int) -> str:
    """The `code` label of an XID: its number for 0..MAX_XID_LABEL, else "other"."""
    return str(code) if 0 <= code <= MAX_XID_LABEL else OTHER


def bounded(value: str, allowed: frozenset[str] | set[str]) -> str:
    """`value` when it is one of `allowed`, else "other"."""
    return value if value in allowed else OTHER
