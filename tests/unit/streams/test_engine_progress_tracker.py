"""ProgressTracker on its own (no pipeline): the per-job progress it keeps and the alerts it
raises, at the edges — telemetry ahead of or behind its job events, the hang deadline heap,
the straggler threshold and the alert's fields."""

from __future__ import annotations

from typing import Any

from schemas.alerts import JobAlert
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from streams.engine.progress import Progress, ProgressClock, ProgressTracker
from streams.policy import load_policy

POLICY = load_policy()
HANG = POLICY.hang_after_ms
T = 1_773_532_800_000


def tracker() -> ProgressTracker:
    return ProgressTracker(POLICY, {}, ProgressClock())


def event(kind: str, ts: int, attempt: int = 0) -> JobEvent:
    nodes = ("n1",) if kind in ("started", "terminated") else ()
    return JobEvent("j", attempt, kind, ts, nodes=nodes)


def tm(kind: str, ts: int, attempt: int = 0, **extra: Any) -> TrainingTelemetry:
    if kind in ("heartbeat", "checkpoint"):
        extra.setdefault("step", 1)
    if kind == "checkpoint":
        extra.setdefault("uri", "s3://ckpt/1")
    return TrainingTelemetry("j", attempt, kind, ts, **extra)


def state(t: ProgressTracker) -> Progress:
    return t.jobs["j"]


def test_a_start_marks_the_attempt_running_from_its_own_time() -> None:
    t = tracker()
    t.on_job_event(event("started", T, attempt=2))
    assert (state(t).attempt, state(t).running, state(t).started_ts) == (2, True, T)
    assert t.started_at("j", 2) == T
    assert t.started_at("j", 1) is None


def test_a_start_arriving_after_its_attempts_telemetry_still_records_the_start() -> None:
    t = tracker()
    t.on_telemetry(tm("heartbeat", T + 5, attempt=1))
    t.on_job_event(event("started", T, attempt=1))
    assert t.started_at("j", 1) == T


def test_a_stale_start_of_an_earlier_attempt_is_ignored() -> None:
    t = tracker()
    t.on_job_event(event("started", T, attempt=2))
    t.on_job_event(event("started", T + 1, attempt=1))
    assert (state(t).attempt, state(t).started_ts) == (2, T)


def test_an_ended_attempt_raises_no_hang_alert() -> None:
    for end in ("terminated", "succeeded", "cancelled"):
        t = tracker()
        t.on_job_event(event("started", T))
        t.on_telemetry(tm("heartbeat", T + 1))
        t.on_job_event(event(end, T + 2))
        assert not state(t).running
        assert t.advance(T + 10 * HANG) == []


def test_a_late_record_of_an_ended_attempt_is_ignored() -> None:
    t = tracker()
    t.on_job_event(event("started", T))
    t.on_telemetry(tm("heartbeat", T + 1))
    t.on_job_event(event("terminated", T + 2))
    assert t.on_telemetry(tm("heartbeat", T + 3)) == []
    assert (state(t).running, state(t).last_beat_ts) == (False, T + 1)


def test_telemetry_ahead_of_its_start_opens_the_new_attempt_keeping_the_checkpoint() -> None:
    t = tracker()
    t.on_job_event(event("started", T))
    t.on_telemetry(tm("checkpoint", T + 1, step=100, uri="s3://c/100"))
    t.on_telemetry(tm("heartbeat", T + 50, attempt=1, step=101))
    s = state(t)
    assert (s.attempt, s.running, s.last_beat_ts, s.started_ts) == (1, True, T + 50, None)
    assert s.checkpoint == {"step": 100, "uri": "s3://c/100", "ts_ms": T + 1, "attempt": 0}
    assert len(t.clock.deadlines) == 1  # the deadline already armed is reused, not doubled


def test_one_hang_deadline_per_job_at_last_beat_plus_hang_after() -> None:
    t = tracker()
    t.on_job_event(event("started", T))
    for i in range(5):
        t.on_telemetry(tm("heartbeat", T + i * 1000))
    assert t.clock.deadlines == [(T + HANG, "j")]
    assert state(t).armed
    # due at T + HANG, but the job beat since: re-armed for its latest beat, no alert
    assert t.advance(T + HANG + 1) == []
    assert t.clock.deadlines == [(T + 4000 + HANG, "j")]
    [hang] = t.advance(T + 4000 + HANG + 1)
    assert (hang.kind, hang.attempt, hang.ts_ms) == ("hang", 0, T + 4000 + HANG + 1)


def test_hang_evidence_is_dated_when_the_silence_passed_hang_after() -> None:
    t = tracker()
    t.on_job_event(event("started", T))
    t.on_telemetry(tm("heartbeat", T + 7))
    assert t.hang_evidence("j", 0, T + 7 + HANG) is None
    item = t.hang_evidence("j", 0, T + 7 + HANG + 1)
    assert item is not None
    assert (item.kind, item.code, item.ts_ms, item.cls) == (
        "reason",
        "Hang",
        T + 7 + HANG,
        "transient",
    )
    assert t.hang_evidence("j", 1, T + 10 * HANG) is None  # another attempt


def test_a_checkpoint_is_kept_with_its_step_uri_time_and_attempt() -> None:
    t = tracker()
    t.on_job_event(event("started", T, attempt=3))
    t.on_telemetry(
        tm("checkpoint", T + 9, attempt=3, step=1200, uri="s3://c/1200", samples_per_s=9.0)
    )
    assert t.checkpoint("j") == {"step": 1200, "uri": "s3://c/1200", "ts_ms": T + 9, "attempt": 3}
    assert state(t).throughput_n == 0  # a checkpoint is not a throughput sample


def test_a_heartbeat_after_a_hang_clears_it() -> None:
    t = tracker()
    t.on_job_event(event("started", T))
    t.on_telemetry(tm("heartbeat", T))
    assert len(t.advance(T + HANG + 1)) == 1
    assert state(t).hung
    t.on_telemetry(tm("heartbeat", T + HANG + 2))
    assert not state(t).hung


def rates(t: ProgressTracker, *samples: float) -> list[JobAlert]:
    out: list[JobAlert] = []
    for i, rate in enumerate(samples):
        out += t.on_telemetry(tm("throughput", T + i, samples_per_s=rate, node="n7"))
    return out


def test_a_rate_exactly_at_the_straggler_ratio_is_not_a_straggler() -> None:
    t = tracker()
    level = [100.0] * POLICY.straggler_min_samples
    assert rates(t, *level, 100.0 * POLICY.straggler_ratio) == []


def test_a_straggler_alert_names_the_job_attempt_time_and_rates() -> None:
    t = tracker()
    t.on_job_event(event("started", T, attempt=4))
    out: list[JobAlert] = []
    for i, rate in enumerate([7.77777] * POLICY.straggler_min_samples + [1.0]):
        out += t.on_telemetry(tm("throughput", T + i, attempt=4, samples_per_s=rate, node="n7"))
    [alert] = out
    assert (alert.kind, alert.job_id, alert.attempt, alert.ts_ms) == (
        "straggler",
        "j",
        4,
        T + POLICY.straggler_min_samples,
    )
    assert alert.detail == {
        "samples_per_s": 1.0,
        "recent_samples_per_s": 7.778,
        "ratio": 0.129,
        "node": "n7",
    }
