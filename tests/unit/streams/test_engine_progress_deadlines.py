"""The hang deadline heap under `ProgressTracker.advance`: several jobs due at once, jobs that
ended or were forgotten, re-arming after a later beat, a watermark that does not move."""

from __future__ import annotations

from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from streams.engine.progress import ProgressClock, ProgressTracker
from streams.policy import load_policy

POLICY = load_policy()
HANG = POLICY.hang_after_ms
T = 1_773_532_800_000


def tracker() -> ProgressTracker:
    return ProgressTracker(POLICY, {}, ProgressClock())


def start(t: ProgressTracker, job: str, ts: int, attempt: int = 0) -> None:
    t.on_job_event(JobEvent(job, attempt, "started", ts, nodes=("n1",)))


def end(t: ProgressTracker, job: str, ts: int, attempt: int = 0) -> None:
    t.on_job_event(JobEvent(job, attempt, "terminated", ts, nodes=("n1",)))


def beat(t: ProgressTracker, job: str, ts: int, attempt: int = 0) -> None:
    t.on_telemetry(TrainingTelemetry(job, attempt, "heartbeat", ts, step=1))


def hung_jobs(t: ProgressTracker, ts: int) -> list[str]:
    return [a.job_id for a in t.advance(ts) if a.kind == "hang"]


def test_hang_alert_says_when_the_job_last_beat_and_for_how_long_in_whole_seconds() -> None:
    t = tracker()
    start(t, "a", T)
    beat(t, "a", T)
    [alert] = t.advance(T + HANG + 1_500)
    assert alert.detail == {"last_heartbeat_ts_ms": T, "silent_s": (HANG + 1_500) // 1000}
    assert alert.detail["silent_s"] == HANG // 1000 + 1


def test_a_watermark_that_does_not_move_raises_nothing() -> None:
    t = tracker()
    t.advance(T + 10 * HANG)
    start(t, "a", T)
    beat(t, "a", T)  # a late record: its deadline is already behind the watermark
    assert t.advance(T + 10 * HANG) == []
    assert t.advance(T + 10 * HANG - 1) == []
    assert t.clock.watermark == T + 10 * HANG
    assert hung_jobs(t, T + 10 * HANG + 1) == ["a"]


def test_a_silent_job_behind_an_ended_one_still_hangs() -> None:
    t = tracker()
    start(t, "ended", T)
    beat(t, "ended", T)
    end(t, "ended", T + 1)
    start(t, "silent", T)
    beat(t, "silent", T + 1)
    assert hung_jobs(t, T + 1 + HANG + 1) == ["silent"]
    assert t.checkpoint("ended") is None and t.started_at("ended", 0) == T  # still tracked


def test_a_silent_job_behind_a_forgotten_one_still_hangs() -> None:
    t = tracker()
    start(t, "gone", T)
    beat(t, "gone", T)
    start(t, "silent", T)
    beat(t, "silent", T + 1)
    del t.jobs["gone"]
    assert hung_jobs(t, T + 1 + HANG + 1) == ["silent"]


def test_a_silent_job_behind_a_re_armed_one_still_hangs() -> None:
    t = tracker()
    start(t, "alive", T)
    beat(t, "alive", T)
    beat(t, "alive", T + 5_000)
    start(t, "silent", T)
    beat(t, "silent", T + 1)
    assert hung_jobs(t, T + 1 + HANG + 1) == ["silent"]
    assert hung_jobs(t, T + 5_000 + HANG + 1) == ["alive"]


def test_a_job_whose_new_deadline_is_exactly_now_is_not_yet_hung() -> None:
    t = tracker()
    start(t, "a", T)
    beat(t, "a", T)
    beat(t, "a", T + 1_000)
    assert t.advance(T + 1_000 + HANG) == []  # silent exactly hang_after: not longer
    assert t.clock.deadlines == [(T + 1_000 + HANG, "a")]
    beat(t, "a", T + 2_000)  # armed already: no second deadline
    assert len(t.clock.deadlines) == 1


def test_an_ended_job_that_runs_again_is_watched_again() -> None:
    t = tracker()
    start(t, "a", T)
    beat(t, "a", T)
    end(t, "a", T + 1)
    assert t.advance(T + HANG + 1) == []  # its deadline passed while it was not running
    start(t, "a", T + HANG + 2, attempt=1)
    beat(t, "a", T + HANG + 3, attempt=1)
    assert hung_jobs(t, T + 2 * HANG + 4) == ["a"]


def test_a_hung_job_reporting_only_throughput_is_not_alerted_twice() -> None:
    t = tracker()
    start(t, "a", T)
    beat(t, "a", T)
    assert hung_jobs(t, T + HANG + 1) == ["a"]
    # throughput is not a sign of life for the loop (no step): the job stays hung
    t.on_telemetry(TrainingTelemetry("a", 0, "throughput", T + HANG + 2, samples_per_s=1.0))
    assert t.jobs["a"].hung
    assert t.advance(T + 3 * HANG) == []
