"""GPU health samples turned into condition changes: a small, pure state machine per GPU.

A condition *fires* on a sample (see `firing`); it becomes active the first time it fires
(`throttle` only after firing for `throttle_sustain_s`) and clears once it has not fired for
`clear_after_s`. Only transitions come out: a newly active condition, and `ok` when the last
active condition clears. Counter-based conditions compare with the previous sample; a counter
that went down (driver reload, GPU reset) is a new baseline, not an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from producers.nvml_source import (
    REASON_HW_POWER_BRAKE,
    REASON_HW_SLOWDOWN,
    REASON_HW_THERMAL,
    REASON_SW_THERMAL,
)
from schemas.health import HARDWARE_CONDITIONS, PRECURSOR_CONDITIONS, Condition, Severity

DEFAULT_THROTTLE_MASK = (
    REASON_HW_SLOWDOWN | REASON_SW_THERMAL | REASON_HW_THERMAL | REASON_HW_POWER_BRAKE
)


@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """When a sampled value counts as a condition. Rates are per minute of sampling time."""

    pcie_replays_per_min: float = 8.0  # DCGM's PCIe replay-rate limit
    nvlink_errors_per_min: float = 0.0  # any rise of the NVLink error counters
    ecc_correctable_per_min: float = 60.0
    throttle_sustain_s: float = 60.0
    throttle_reasons_mask: int = DEFAULT_THROTTLE_MASK
    clear_after_s: float = 60.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of a GPU. `None`: not supported or not readable this time."""

    t: float  # monotonic seconds
    lost: bool = False
    lost_detail: str | None = None
    ecc_uncorrected: int | None = None
    ecc_corrected: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    temp_c: int | None = None
    temp_shutdown_c: int | None = None
    clocks_reasons: int | None = None
    pcie_replays: int | None = None
    nvlink_errors: int | None = None

    def metrics(self) -> dict[str, Any]:
        names = (
            "ecc_uncorrected",
            "ecc_corrected",
            "remap_pending",
            "remap_failure",
            "temp_c",
            "temp_shutdown_c",
            "clocks_reasons",
            "pcie_replays",
            "nvlink_errors",
        )
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


@dataclass(frozen=True, slots=True)
class Change:
    condition: Condition
    severity: Severity
    detail: str
    metrics: dict[str, Any]


def severity_of(condition: Condition) -> Severity:
    if condition in HARDWARE_CONDITIONS:
        return "critical"
    if condition in PRECURSOR_CONDITIONS or condition == "throttle":
        return "warning"
    return "info"


def _increase(prev: int | None, cur: int | None) -> int | None:
    if prev is None or cur is None or cur < prev:
        return None
    return cur - prev


def _rate_per_min(prev: GpuSample, cur: GpuSample, delta: int | None) -> float | None:
    dt = cur.t - prev.t
    if delta is None or dt <= 0:
        return None
    return delta * 60.0 / dt


def firing(prev: GpuSample | None, cur: GpuSample, th: HealthThresholds) -> dict[Condition, str]:
    """Conditions this sample shows, each with a human-readable reason. Throttling is
    reported as `throttle` here; the tracker requires it to be sustained."""
    if cur.lost:
        return {"gpu_lost": cur.lost_detail or "NVML reports the GPU lost"}
    out: dict[Condition, str] = {}
    if cur.remap_failure:
        out["row_remap_failure"] = "row remapping failed"
    if cur.remap_pending:
        out["row_remap_pending"] = "row remapping pending (GPU reset needed)"
    reasons = cur.clocks_reasons or 0
    if cur.temp_c is not None and cur.temp_shutdown_c and cur.temp_c >= cur.temp_shutdown_c:
        out["thermal"] = f"temperature {cur.temp_c} C >= shutdown threshold {cur.temp_shutdown_c} C"
    elif reasons & REASON_HW_THERMAL:
        out["thermal"] = f"HW thermal slowdown (clock event reasons {reasons:#x})"
    if reasons & REASON_HW_POWER_BRAKE:
        out["power"] = f"HW power brake slowdown (clock event reasons {reasons:#x})"
    if reasons & th.throttle_reasons_mask:
        out["throttle"] = f"clocks held down (clock event reasons {reasons:#x})"
    if prev is None or prev.lost:
        return out
    ecc_unc = _increase(prev.ecc_uncorrected, cur.ecc_uncorrected)
    if ecc_unc:
        out["ecc_uncorrectable"] = f"{ecc_unc} new uncorrectable ECC errors"
    checks: tuple[tuple[Condition, int | None, int | None, float, str], ...] = (
        ("ecc_correctable_rate", prev.ecc_corrected, cur.ecc_corrected,
         th.ecc_correctable_per_min, "corrected ECC errors"),
        ("pcie", prev.pcie_replays, cur.pcie_replays, th.pcie_replays_per_min, "PCIe replays"),
        ("nvlink", prev.nvlink_errors, cur.nvlink_errors, th.nvlink_errors_per_min,
         "NVLink errors"),
    )  # fmt: skip
    for condition, before, now, limit, what in checks:
        rate = _rate_per_min(prev, cur, _increase(before, now))
        if rate is not None and rate > limit:
            out[condition] = f"{what} at {rate:.1f}/min (limit {limit:g}/min)"
    return out


@dataclass
class HealthTracker:
    """The condition state of one GPU."""

    thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    active: dict[Condition, float] = field(default_factory=dict)  # condition -> last time it fired
    throttle_since: float | None = None
    prev: GpuSample | None = None

    def update(self, sample: GpuSample) -> list[Change]:
        th = self.thresholds
        now = firing(self.prev, sample, th)
        if "throttle" in now:
            if self.throttle_since is None:
                self.throttle_since = sample.t
            if sample.t - self.throttle_since < th.throttle_sustain_s:
                del now["throttle"]
        else:
            self.throttle_since = None
        if not sample.lost:
            self.prev = sample
        metrics = sample.metrics()
        changes = [
            Change(c, severity_of(c), now[c], metrics)
            for c in sorted(now, key=_severity_rank)
            if c not in self.active
        ]
        for c in now:
            self.active[c] = sample.t
        cleared = sorted(
            c for c, t in self.active.items() if c not in now and sample.t - t >= th.clear_after_s
        )
        for c in cleared:
            del self.active[c]
        if cleared and not self.active:
            changes.append(Change("ok", "info", "cleared: " + ", ".join(cleared), metrics))
        return changes


def _severity_rank(condition: Condition) -> tuple[int, str]:
    order = {"critical": 0, "warning": 1, "info": 2}
    return order[severity_of(condition)], condition
