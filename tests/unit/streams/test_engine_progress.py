"""Training telemetry in the engine: hang alerts and Hang evidence, stragglers, checkpoints."""

from __future__ import annotations

from typing import Any

from schemas.alerts import JobAlert
from schemas.decisions import Decision
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from streams.engine.local import LocalPipeline, Output
from streams.policy import load_policy

S = 1000
T0 = 1_773_532_800_000
POLICY = load_policy()
HANG = POLICY.hang_after_ms


def started(job: str, ts: int, attempt: int = 0) -> JobEvent:
    return JobEvent(job_id=job, attempt=attempt, type="started", ts_ms=ts, nodes=("n1",))


def terminated(job: str, ts: int, attempt: int = 0, reason: str | None = None) -> JobEvent:
    return JobEvent(
        job_id=job, attempt=attempt, type="terminated", ts_ms=ts, nodes=("n1",), reason=reason
    )


def tm(job: str, kind: str, ts: int, attempt: int = 0, **extra: Any) -> TrainingTelemetry:
    return TrainingTelemetry(job_id=job, attempt=attempt, kind=kind, ts_ms=ts, **extra)


def run(records: list[Any]) -> list[Output]:
    pipe = LocalPipeline(POLICY)
    out: list[Output] = []
    for rec in records:
        out.extend(pipe.feed(rec))
    out.extend(pipe.finish())
    return out


def alerts(out: list[Output], kind: str) -> list[JobAlert]:
    return [o for o in out if isinstance(o, JobAlert) and o.kind == kind]


def decision(out: list[Output]) -> Decision:
    [d] = [o for o in out if isinstance(o, Decision)]
    return d


def test_a_running_job_silent_past_hang_after_gets_one_hang_alert() -> None:
    out = run(
        [
            started("j", T0),
            tm("j", "heartbeat", T0 + 10 * S, step=1),
            tm("other", "heartbeat", T0 + 10 * S + HANG, step=1),  # time passes: not yet
            tm("other", "heartbeat", T0 + 10 * S + HANG + 1, step=2),  # one past the deadline
            tm("other", "heartbeat", T0 + 10 * S + 3 * HANG, step=3),  # still silent: no repeat
        ]
    )
    [hang] = [a for a in alerts(out, "hang") if a.job_id == "j"]
    assert (hang.attempt, hang.ts_ms) == (0, T0 + 10 * S + HANG + 1)
    assert hang.detail["last_heartbeat_ts_ms"] == T0 + 10 * S


def test_heartbeats_keep_a_job_from_hanging() -> None:
    beats = [tm("j", "heartbeat", T0 + i * HANG // 2, step=i) for i in range(1, 8)]
    assert not alerts(run([started("j", T0), *beats]), "hang")


def test_a_job_that_never_reports_telemetry_is_never_judged_silent() -> None:
    out = run([started("j", T0), terminated("j", T0 + 5 * HANG)])
    assert not alerts(out, "hang")
    assert decision(out).verdict == "unknown"


def test_termination_long_after_the_last_heartbeat_is_a_transient_hang() -> None:
    out = run(
        [
            started("j", T0),
            tm("j", "heartbeat", T0 + S, step=1),
            terminated("j", T0 + S + HANG + 1),
        ]
    )
    d = decision(out)
    assert (d.verdict, d.action, d.rule) == ("transient", "retry", "transient.retry")
    assert [(e.kind, e.code, e.cls) for e in d.evidence] == [("reason", "Hang", "transient")]


def test_termination_within_hang_after_of_the_last_heartbeat_carries_no_hang() -> None:
    out = run(
        [
            started("j", T0),
            tm("j", "heartbeat", T0 + S, step=1),
            terminated("j", T0 + S + HANG, reason="OOMKilled"),
        ]
    )
    d = decision(out)
    assert d.verdict == "software"
    assert [e.code for e in d.evidence] == ["OOMKilled"]


def test_decision_carries_the_last_checkpoint_for_the_requeue() -> None:
    out = run(
        [
            started("j", T0),
            tm("j", "checkpoint", T0 + S, step=100, uri="s3://c/100"),
            tm("j", "checkpoint", T0 + 2 * S, step=200, uri="s3://c/200"),
            terminated("j", T0 + 3 * S, reason="NCCLTimeout"),
        ]
    )
    d = decision(out)
    assert d.checkpoint is not None
    assert (d.checkpoint["step"], d.checkpoint["uri"]) == (200, "s3://c/200")
    assert d.to_dict()["checkpoint"]["step"] == 200


def test_a_new_attempt_resumes_silence_tracking_and_keeps_the_checkpoint() -> None:
    out = run(
        [
            started("j", T0),
            tm("j", "checkpoint", T0 + S, step=100, uri="s3://c/100"),
            terminated("j", T0 + 2 * S, reason="NCCLTimeout"),
            started("j", T0 + 200 * S, attempt=1),
            tm("j", "heartbeat", T0 + 201 * S, attempt=1, step=101),
            tm("j", "heartbeat", T0 + 202 * S, step=5),  # a late record of attempt 0: ignored
            terminated("j", T0 + 203 * S, attempt=1, reason="NCCLTimeout"),
        ]
    )
    decisions = [o for o in out if isinstance(o, Decision)]
    assert [d.attempt for d in decisions] == [0, 1]
    assert decisions[1].checkpoint is not None and decisions[1].checkpoint["step"] == 100
    assert not alerts(out, "hang")


def test_throughput_far_below_the_jobs_own_level_is_one_straggler_alert() -> None:
    rates = [100.0] * POLICY.straggler_min_samples + [40.0, 35.0, 100.0, 20.0]
    out = run(
        [started("j", T0)]
        + [
            tm("j", "throughput", T0 + i * S, samples_per_s=r, node="n1")
            for i, r in enumerate(rates, start=1)
        ]
    )
    stragglers = alerts(out, "straggler")
    # 40 and 35 are one episode; recovery to 100 re-arms; 20 is a second episode.
    assert [a.detail["samples_per_s"] for a in stragglers] == [40.0, 20.0]
    assert stragglers[0].detail["node"] == "n1"


def test_too_few_samples_never_call_a_straggler() -> None:
    rates = [100.0] * (POLICY.straggler_min_samples - 1) + [1.0]
    out = run(
        [started("j", T0)]
        + [tm("j", "throughput", T0 + i * S, samples_per_s=r) for i, r in enumerate(rates, start=1)]
    )
    assert not alerts(out, "straggler")


def test_a_previous_tenants_software_xid_is_not_this_jobs_evidence() -> None:
    from schemas.xid import GpuXid

    def xid(code: int, ts: int) -> GpuXid:
        return GpuXid(node="n1", xid=code, ts_ms=ts)

    out = run(
        [
            xid(31, T0),  # the node's previous tenant faulted
            xid(79, T0 + S),  # and the GPU fell off the bus before this job arrived
            started("j", T0 + 60 * S),
            terminated("j", T0 + 300 * S, reason="NCCLTimeout"),
            started("k", T0 + 400 * S),
            xid(13, T0 + 500 * S),  # during job k: its own bug
            terminated("k", T0 + 510 * S),
        ]
    )
    by_job = {d.job_id: d for d in out if isinstance(d, Decision)}
    assert [e.code for e in by_job["j"].evidence] == [79, "NCCLTimeout"]
    assert by_job["j"].verdict == "hardware"  # hardware before the start still counts
    assert by_job["k"].verdict == "hardware"  # the 79 is still inside k's lookback
    assert 13 in [e.code for e in by_job["k"].evidence]


def test_software_xid_before_the_start_no_longer_turns_a_timeout_into_a_reject() -> None:
    from schemas.xid import GpuXid

    before = GpuXid(node="n1", xid=31, ts_ms=T0)
    during = GpuXid(node="n1", xid=31, ts_ms=T0 + 200 * S)
    out_before = run(
        [before, started("m", T0 + 60 * S), terminated("m", T0 + 300 * S, reason="NCCLTimeout")]
    )
    out_during = run(
        [started("m", T0 + 60 * S), during, terminated("m", T0 + 300 * S, reason="NCCLTimeout")]
    )
    assert decision(out_before).verdict == "transient"
    assert decision(out_during).verdict == "software"


def ok_sample(ts: int) -> Any:
    from schemas.health import GpuHealth

    return GpuHealth(node="n9", ts_ms=ts, condition="ok")


def test_gpu_signals_past_a_hang_deadline_raise_the_hang_alert() -> None:
    # Only node agents report while the job is silent: their samples move the job side's
    # clock too (one watermark for both halves), first at the deadline, then one past it.
    deadline = T0 + 10 * S + HANG
    out = run(
        [
            started("j", T0),
            tm("j", "heartbeat", T0 + 10 * S, step=1),
            ok_sample(deadline),
            ok_sample(deadline + 1),
        ]
    )
    [hang] = alerts(out, "hang")
    assert (hang.job_id, hang.ts_ms) == ("j", deadline + 1)


def test_a_gpu_signal_exactly_at_a_deadline_leaves_the_job_clock_for_later_events() -> None:
    # The sample at j's deadline passes no deadline, so it must not move the job side's clock:
    # k's late heartbeat arms an earlier deadline that the next job event still passes.
    deadline_j = T0 + 10 * S + HANG
    out = run(
        [
            started("j", T0),
            started("k", T0),
            tm("j", "heartbeat", T0 + 10 * S, step=1),
            ok_sample(deadline_j),
            tm("k", "heartbeat", T0 + 5 * S, step=1),
            started("x", T0 + 5 * S + HANG + 1),
        ]
    )
    assert [(a.job_id, a.ts_ms) for a in alerts(out, "hang")] == [("k", T0 + 5 * S + HANG + 1)]
