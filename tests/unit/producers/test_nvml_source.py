"""The NVML source over a scripted NVML: XID events, timeouts, a GPU falling off the bus,
metrics NVML does not support, and the pynvml error translation."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pynvml
import pytest
from nvml_fake import FakeGpu, FakeNvml, lost, unsupported, xid

from producers.health import HealthThresholds
from producers.nvml_source import (
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    RESET_REQUIRED,
    TIMEOUT,
    NvmlError,
    NvmlGpuLost,
    NvmlNotSupported,
    NvmlTimeout,
    NvmlUnavailable,
    PynvmlBackend,
    nvml_error,
)
from producers.nvml_watch import NvmlSource
from schemas.health import GpuHealth
from schemas.xid import GpuXid

U0 = "GPU-11111111-2222-3333-4444-555555555555"
U1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
Record = GpuXid | GpuHealth


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu(U0, "0000:3b:00.0"), FakeGpu(U1, "0000:86:00.0")]


@contextmanager
def running(source: NvmlSource) -> Iterator[queue.Queue[Record]]:
    out: queue.Queue[Record] = queue.Queue()
    thread = threading.Thread(target=source.run, args=(out.put,), daemon=True)
    thread.start()
    try:
        yield out
    finally:
        source.close()
        thread.join(10)
        assert not thread.is_alive()


def next_record(out: queue.Queue[Record]) -> Record:
    return out.get(timeout=10)


def test_xids_timeouts_then_gpu_lost() -> None:
    fake = FakeNvml(two_gpus())
    fake.events.extend(
        [
            xid(13, U0),
            NvmlTimeout(TIMEOUT),
            NvmlTimeout(TIMEOUT),
            xid(48, U1),
            NvmlTimeout(TIMEOUT),
            lambda: setattr(fake.gpus[1], "lost", True),  # GPU 1 falls off the bus ...
            lost(),  # ... and the event wait says so; no XID 79 event ever comes
            lost(),
        ]
    )
    source = NvmlSource(fake, "node-a", interval_s=3600, wait_timeout_ms=5)
    with running(source) as out:
        first, second, third = next_record(out), next_record(out), next_record(out)
        assert fake.events_done.wait(10)
    assert isinstance(first, GpuXid) and isinstance(second, GpuXid)
    assert (first.xid, first.gpu_index, first.gpu_uuid, first.pci_bus_id) == (
        13,
        0,
        U0,
        "0000:3b:00.0",
    )
    assert (second.xid, second.gpu_index, second.gpu_uuid) == (48, 1, U1)
    assert first.node == "node-a" and first.source == "nvml"
    assert isinstance(third, GpuHealth)
    assert (third.condition, third.severity, third.gpu_index) == ("gpu_lost", "critical", 1)
    assert (third.gpu_uuid, third.pci_bus_id) == (U1, "0000:86:00.0")
    assert out.empty()  # GPU 0 stayed healthy: no transitions, no records
    assert fake.freed and fake.registered == [0, 1]


def test_an_xid_79_event_samples_at_once_and_reports_the_gpu_lost() -> None:
    fake = FakeNvml(two_gpus())
    fake.events.extend([lambda: setattr(fake.gpus[0], "lost", True), xid(79, U0)])
    source = NvmlSource(fake, "node-a", interval_s=3600, wait_timeout_ms=5)
    with running(source) as out:
        event, health = next_record(out), next_record(out)
    assert isinstance(event, GpuXid) and event.xid == 79
    assert isinstance(health, GpuHealth) and health.condition == "gpu_lost"
    assert health.gpu_index == 0


def test_reset_required_counts_as_lost() -> None:
    assert isinstance(nvml_error(RESET_REQUIRED), NvmlGpuLost)
    assert isinstance(nvml_error(GPU_IS_LOST), NvmlGpuLost)


def test_unsupported_metrics_are_skipped_and_others_still_work() -> None:
    gpu = FakeGpu(
        U0,
        "0000:3b:00.0",
        ecc_uncorrected=unsupported(),
        ecc_corrected=unsupported(),
        remapped_rows=unsupported(),
        pcie_replays=unsupported(),
        temperature_shutdown=unsupported(),
        clocks_reasons=0x40,  # HW thermal slowdown still readable
    )
    fake = FakeNvml([gpu])
    records: list[Record] = []
    source = NvmlSource(fake, "node-a")
    source.start()
    source.sample_once(records.append)
    source.sample_once(records.append)
    assert [(r.condition, r.gpu_index) for r in records if isinstance(r, GpuHealth)] == [
        ("thermal", 0)
    ]
    # Asked once, then remembered as unsupported.
    assert fake.calls.count("ecc_uncorrected") == 1
    assert fake.calls.count("remapped_rows") == 1
    assert fake.calls.count("clocks_reasons") == 2


def test_other_nvml_errors_on_a_metric_do_not_stop_sampling() -> None:
    gpu = FakeGpu(U0, "0000:3b:00.0", temperature=NvmlError(999, "Unknown Error"))
    fake = FakeNvml([gpu])
    source = NvmlSource(fake, "node-a", thresholds=HealthThresholds(clear_after_s=0))
    source.start()
    records: list[Record] = []
    source.sample_once(records.append)
    gpu.remapped_rows = (0, 0, True, False)
    source.sample_once(records.append)
    assert [r.condition for r in records if isinstance(r, GpuHealth)] == ["row_remap_pending"]
    assert fake.calls.count("temperature") == 2  # not remembered: it may work next time


def test_nvlink_errors_summed_over_active_links() -> None:
    gpu = FakeGpu(U0, "0000:3b:00.0", nvlinks={0: 5, 2: 1})
    fake = FakeNvml([gpu])
    ticks = iter([0.0, 10.0])
    source = NvmlSource(fake, "node-a", clock=lambda: next(ticks))
    source.start()
    records: list[Record] = []
    source.sample_once(records.append)
    gpu.nvlinks[2] = 3
    source.sample_once(records.append)
    assert [r.condition for r in records if isinstance(r, GpuHealth)] == ["nvlink"]


def test_a_gpu_without_xid_events_is_still_sampled() -> None:
    gpus = two_gpus()
    gpus[0].xid_events_supported = False
    fake = FakeNvml(gpus)
    source = NvmlSource(fake, "node-a", interval_s=3600, wait_timeout_ms=5)
    with running(source):
        assert fake.events_done.wait(10)
        assert fake.sampled.wait(10)
    assert fake.registered == [1]


def test_a_gpu_lost_before_the_agent_started() -> None:
    gpus = two_gpus()
    gpus[1].lost = True
    fake = FakeNvml(gpus)
    source = NvmlSource(fake, "node-a")
    infos = source.start()
    assert (infos[1].uuid, infos[1].pci_bus_id) == (None, None)
    records: list[Record] = []
    source.sample_once(records.append)
    assert [(r.condition, r.gpu_index) for r in records if isinstance(r, GpuHealth)] == [
        ("gpu_lost", 1)
    ]


def test_the_gpu_comes_back_ok_after_a_reset() -> None:
    gpus = two_gpus()
    fake = FakeNvml(gpus)
    ticks = iter([0.0, 10.0, 20.0])
    source = NvmlSource(
        fake, "node-a", thresholds=HealthThresholds(clear_after_s=10), clock=lambda: next(ticks)
    )
    source.start()
    records: list[Record] = []
    gpus[0].lost = True
    source.sample_once(records.append)
    source.sample_once(records.append)
    gpus[0].lost = False
    source.sample_once(records.append)
    assert [r.condition for r in records if isinstance(r, GpuHealth)] == ["gpu_lost", "ok"]


def test_pynvml_errors_are_translated() -> None:
    backend = PynvmlBackend()
    # No GPU here: the real library is missing, which is the clear "unavailable" case.
    with pytest.raises(NvmlUnavailable) as info:
        backend.init()
    assert info.value.code == LIBRARY_NOT_FOUND


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (TIMEOUT, NvmlTimeout),
        (GPU_IS_LOST, NvmlGpuLost),
        (RESET_REQUIRED, NvmlGpuLost),
        (3, NvmlNotSupported),
        (13, NvmlNotSupported),
        (999, NvmlError),
    ],
)
def test_real_pynvml_error_objects_map_to_our_types(code: int, kind: type[NvmlError]) -> None:
    from producers.nvml_source import _translated

    with pytest.raises(kind) as info, _translated():
        raise pynvml.NVMLError(code)
    assert info.value.code == code


def test_a_crash_of_the_event_thread_fails_the_source() -> None:
    fake = FakeNvml(two_gpus())
    fake.events.extend([xid(13, U0)])
    source = NvmlSource(fake, "node-a", interval_s=3600, wait_timeout_ms=5)

    def broken_sink(rec: Record) -> None:
        if isinstance(rec, GpuXid):
            raise ValueError("boom")

    with pytest.raises(RuntimeError, match="XID event thread failed"):
        source.run(broken_sink)
