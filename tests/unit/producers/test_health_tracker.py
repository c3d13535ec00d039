"""The health state machine: samples in, condition transitions out."""

from __future__ import annotations

from producers.health import Change, GpuSample, HealthThresholds, HealthTracker
from producers.nvml_source import (
    REASON_HW_POWER_BRAKE,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
)

BASE = {
    "ecc_uncorrected": 0,
    "ecc_corrected": 0,
    "remap_pending": False,
    "remap_failure": False,
    "temp_c": 40,
    "temp_shutdown_c": 92,
    "clocks_reasons": 0,
    "pcie_replays": 0,
    "nvlink_errors": 0,
}


def sample(t: float, **changes: object) -> GpuSample:
    return GpuSample(t=t, **{**BASE, **changes})  # type: ignore[arg-type]


def conditions(changes: list[Change]) -> list[str]:
    return [c.condition for c in changes]


def run(tracker: HealthTracker, samples: list[GpuSample]) -> list[list[str]]:
    return [conditions(tracker.update(s)) for s in samples]


def test_a_healthy_gpu_publishes_nothing() -> None:
    tracker = HealthTracker()
    assert run(tracker, [sample(t) for t in range(0, 100, 10)]) == [[]] * 10


def test_uncorrectable_ecc_increase_then_back_to_ok_after_the_quiet_period() -> None:
    tracker = HealthTracker(HealthThresholds(clear_after_s=30))
    out = run(
        tracker,
        [
            sample(0, ecc_uncorrected=3),  # the first sample is the baseline, not an event
            sample(10, ecc_uncorrected=5),
            sample(20, ecc_uncorrected=5),
            sample(30, ecc_uncorrected=5),
            sample(40, ecc_uncorrected=5),
        ],
    )
    assert out == [[], ["ecc_uncorrectable"], [], [], ["ok"]]


def test_change_records_carry_severity_detail_and_metrics() -> None:
    tracker = HealthTracker()
    tracker.update(sample(0))
    (change,) = tracker.update(sample(10, ecc_uncorrected=2))
    assert change.severity == "critical"
    assert "2 new uncorrectable" in change.detail
    assert change.metrics["ecc_uncorrected"] == 2


def test_a_counter_that_goes_down_is_a_new_baseline() -> None:
    tracker = HealthTracker()
    out = run(tracker, [sample(0, ecc_uncorrected=9), sample(10, ecc_uncorrected=0)])
    assert out == [[], []]


def test_row_remapping_pending_is_a_warning_failure_is_critical() -> None:
    tracker = HealthTracker()
    first = tracker.update(sample(0, remap_pending=True))
    assert [(c.condition, c.severity) for c in first] == [("row_remap_pending", "warning")]
    second = tracker.update(sample(10, remap_pending=True, remap_failure=True))
    assert [(c.condition, c.severity) for c in second] == [("row_remap_failure", "critical")]


def test_thermal_from_the_shutdown_threshold_or_hw_thermal_slowdown() -> None:
    assert run(HealthTracker(), [sample(0, temp_c=92)]) == [["thermal"]]
    assert run(HealthTracker(), [sample(0, clocks_reasons=REASON_HW_THERMAL)]) == [["thermal"]]
    assert run(HealthTracker(), [sample(0, temp_c=91)]) == [[]]


def test_power_brake_is_power() -> None:
    assert run(HealthTracker(), [sample(0, clocks_reasons=REASON_HW_POWER_BRAKE)]) == [["power"]]


def test_pcie_replay_rate_over_the_threshold() -> None:
    tracker = HealthTracker(HealthThresholds(pcie_replays_per_min=8))
    # +1 in 10 s is 6/min (under 8); +2 in 10 s is 12/min.
    out = run(tracker, [sample(0), sample(10, pcie_replays=1), sample(20, pcie_replays=3)])
    assert out == [[], [], ["pcie"]]


def test_nvlink_counters_rising_is_nvlink() -> None:
    out = run(HealthTracker(), [sample(0, nvlink_errors=7), sample(10, nvlink_errors=8)])
    assert out == [[], ["nvlink"]]


def test_correctable_ecc_rate() -> None:
    tracker = HealthTracker(HealthThresholds(ecc_correctable_per_min=60))
    out = run(tracker, [sample(0), sample(10, ecc_corrected=5), sample(20, ecc_corrected=20)])
    assert out == [[], [], ["ecc_correctable_rate"]]


def test_throttle_only_when_sustained_and_sw_power_cap_does_not_count() -> None:
    tracker = HealthTracker(HealthThresholds(throttle_sustain_s=30))
    throttled = [sample(t, clocks_reasons=REASON_SW_THERMAL) for t in (0, 10, 20, 30)]
    assert run(tracker, throttled) == [[], [], [], ["throttle"]]
    other = HealthTracker(HealthThresholds(throttle_sustain_s=0))
    assert run(other, [sample(0, clocks_reasons=REASON_SW_POWER_CAP)]) == [[]]


def test_an_interruption_restarts_the_throttle_clock() -> None:
    tracker = HealthTracker(HealthThresholds(throttle_sustain_s=20))
    r = REASON_SW_THERMAL
    out = run(
        tracker,
        [sample(0, clocks_reasons=r), sample(10, clocks_reasons=r), sample(15),
         sample(20, clocks_reasons=r), sample(30, clocks_reasons=r), sample(40, clocks_reasons=r)],
    )  # fmt: skip
    assert out == [[], [], [], [], [], ["throttle"]]


def test_ok_only_once_every_condition_has_cleared() -> None:
    tracker = HealthTracker(HealthThresholds(clear_after_s=10))
    out = run(
        tracker,
        [
            sample(0, remap_pending=True, temp_c=95),
            sample(10, remap_pending=True),  # thermal clears, remap still pending: no ok
            sample(20, remap_pending=True),
            sample(30),  # 10 s quiet since the last pending sample
            sample(40),
        ],
    )
    assert out == [["thermal", "row_remap_pending"], [], [], ["ok"], []]


def test_a_condition_that_returns_is_published_again() -> None:
    tracker = HealthTracker(HealthThresholds(clear_after_s=10))
    out = run(
        tracker,
        [sample(0, temp_c=95), sample(10), sample(20, temp_c=95), sample(30, temp_c=95)],
    )
    assert out == [["thermal"], ["ok"], ["thermal"], []]


def test_gpu_lost_then_recovered() -> None:
    tracker = HealthTracker(HealthThresholds(clear_after_s=10))
    lost = GpuSample(t=10, lost=True, lost_detail="GPU lost (temperature: GPU is lost)")
    out = tracker.update(sample(0, ecc_uncorrected=1))
    assert out == []
    (change,) = tracker.update(lost)
    assert (change.condition, change.severity) == ("gpu_lost", "critical")
    assert "GPU is lost" in change.detail
    # Back after a reset: counters restart; no false ECC event against the pre-loss sample.
    assert conditions(tracker.update(sample(20, ecc_uncorrected=0))) == ["ok"]


def test_several_new_conditions_come_out_critical_first() -> None:
    tracker = HealthTracker()
    out = tracker.update(
        sample(0, remap_pending=True, remap_failure=True, clocks_reasons=REASON_HW_POWER_BRAKE)
    )
    assert conditions(out) == ["power", "row_remap_failure", "row_remap_pending"]
