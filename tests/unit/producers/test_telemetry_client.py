"""The telemetry client without a bus: it never raises, never blocks, counts what it drops,
and `close()` returns within its timeout. (Delivery is proven on a real broker in
tests/integration/test_producers.py.) Also the `training.telemetry` record schema."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Iterator

import pytest

from producers.telemetry import TelemetryClient
from schemas.errors import SchemaError
from schemas.telemetry import TrainingTelemetry

T0 = 10**12  # event times are epoch ms, at or above schemas.bounds.TS_FLOOR_MS


@pytest.fixture
def dead_bootstrap() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def client(dead_bootstrap: str) -> Iterator[TelemetryClient]:
    tm = TelemetryClient("job-1", 2, dead_bootstrap, node="gpu-01", queue_size=4)
    yield tm
    tm.close(timeout=0.5)


def test_calls_queue_without_blocking_and_the_oldest_are_dropped(client: TelemetryClient) -> None:
    start = time.monotonic()
    results = [client.heartbeat(step) for step in range(10)]
    assert time.monotonic() - start < 1.0
    assert all(results)
    assert client.queued == 4
    assert client.dropped == 6


def test_bad_values_are_dropped_and_counted_never_raised(client: TelemetryClient) -> None:
    assert client.heartbeat("not a step") is False  # type: ignore[arg-type]
    assert client.heartbeat(-1) is False
    assert client.throughput(math.nan) is False
    assert client.throughput(-3.0) is False
    assert client.checkpoint(10, "") is False
    assert client.checkpoint(10, "s3://bucket/ckpt-10") is True
    assert client.dropped == 5


def test_close_returns_within_its_timeout_and_counts_what_was_not_sent(
    client: TelemetryClient,
) -> None:
    client.heartbeat(1)
    client.throughput(100.0)
    start = time.monotonic()
    client.close(timeout=0.3)
    assert time.monotonic() - start < 6.0
    assert client.sent == 0 and client.dropped == 2 and client.queued == 0
    assert client.heartbeat(2) is False  # after close: dropped, not raised
    client.close()  # idempotent


def test_context_manager_closes(dead_bootstrap: str) -> None:
    with TelemetryClient("job-1", 0, dead_bootstrap, close_timeout_s=0.2) as tm:
        tm.heartbeat(0)
    assert not tm._thread.is_alive()
    assert tm.dropped == 1


def test_invalid_construction_fails_early(dead_bootstrap: str) -> None:
    with pytest.raises(ValueError, match="job_id"):
        TelemetryClient("", 0, dead_bootstrap)
    with pytest.raises(ValueError, match="attempt"):
        TelemetryClient("j", -1, dead_bootstrap)


def test_from_env_reads_slurm_variables(
    monkeypatch: pytest.MonkeyPatch, dead_bootstrap: str
) -> None:
    monkeypatch.delenv("GPUFAILOVER_JOB_ID", raising=False)
    monkeypatch.delenv("GPUFAILOVER_ATTEMPT", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    with TelemetryClient.from_env(bootstrap=dead_bootstrap, close_timeout_s=0.2) as tm:
        assert (tm.job_id, tm.attempt) == ("4242", 3)
    monkeypatch.setenv("GPUFAILOVER_JOB_ID", "llm-7b")
    monkeypatch.setenv("GPUFAILOVER_ATTEMPT", "1")
    with TelemetryClient.from_env(bootstrap=dead_bootstrap, close_timeout_s=0.2) as tm:
        assert (tm.job_id, tm.attempt) == ("llm-7b", 1)


# -- the record schema ---------------------------------------------------------------------


def test_schema_round_trip() -> None:
    rec = TrainingTelemetry(
        job_id="j", attempt=1, kind="checkpoint", ts_ms=T0 + 5, step=100, uri="s3://b/c", node="n"
    )
    assert TrainingTelemetry.from_dict(rec.to_dict()) == rec
    assert rec.to_dict() == {
        "schema_version": 1,
        "job_id": "j",
        "attempt": 1,
        "kind": "checkpoint",
        "ts_ms": T0 + 5,
        "step": 100,
        "uri": "s3://b/c",
        "node": "n",
    }
    tp = TrainingTelemetry.from_dict(
        {"job_id": "j", "attempt": 0, "kind": "throughput", "ts_ms": T0, "samples_per_s": 12}
    )
    assert tp.samples_per_s == 12.0


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"job_id": "j", "attempt": 0, "kind": "heartbeat", "ts_ms": T0}, "step"),
        ({"job_id": "j", "attempt": 0, "kind": "throughput", "ts_ms": T0}, "samples_per_s"),
        ({"job_id": "j", "attempt": 0, "kind": "checkpoint", "ts_ms": T0, "step": 1}, "uri"),
        ({"job_id": "j", "attempt": 0, "kind": "loss", "ts_ms": T0}, "kind"),
        ({"job_id": "j", "attempt": -1, "kind": "heartbeat", "ts_ms": T0, "step": 1}, "attempt"),
        (
            {"job_id": "j", "attempt": 0, "kind": "throughput", "ts_ms": T0, "samples_per_s": "x"},
            "samples_per_s",
        ),
        (
            {"job_id": "j", "attempt": 0, "kind": "throughput", "ts_ms": T0, "samples_per_s": True},
            "samples_per_s",
        ),
        ({"attempt": 0, "kind": "heartbeat", "ts_ms": T0, "step": 1}, "job_id"),
        (
            {"schema_version": 2, "job_id": "j", "attempt": 0, "kind": "heartbeat", "ts_ms": T0},
            "schema_version",
        ),
    ],
)
def test_schema_rejects(value: dict[str, object], field: str) -> None:
    with pytest.raises(SchemaError) as info:
        TrainingTelemetry.from_dict(value)
    assert info.value.field == field
