"""The NVML source: XID critical events waited on in a thread, health sampled every N seconds.

Both feed records to the agent through `sink` (called from these threads), and a watchdog
thread reports an NVML call that hangs (`producers.nvml_watchdog`). A `GpuIsLost` /
`RESET_REQUIRED` from the event wait wakes the sampler at once, which finds the lost GPU and
reports `gpu_lost` (the XID 79 event may never arrive).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from producers.health import GpuSample, HealthThresholds, HealthTracker
from producers.nvml_source import (
    NVLINK_ERROR_COUNTERS,
    Nvml,
    NvmlError,
    NvmlGpuLost,
    NvmlNotSupported,
    NvmlTimeout,
    NvmlXidEvent,
)
from producers.nvml_watchdog import DEFAULT_HANG_TIMEOUT_S, NvmlWatchdog, TimedNvml
from schemas.health import GpuHealth
from schemas.xid import GpuXid

log = logging.getLogger(__name__)

Sink = Callable[[GpuXid | GpuHealth], None]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class GpuInfo:
    index: int
    handle: Any
    uuid: str | None
    pci_bus_id: str | None
    nvlinks: list[int] | None = None  # active links, found on the first sample
    unsupported: set[str] = field(default_factory=set)  # metrics answered NotSupported
    warned: set[tuple[str, int]] = field(default_factory=set)


def enumerate_gpus(nvml: Nvml) -> list[GpuInfo]:
    """Every GPU NVML sees; one already lost keeps its index with uuid/pci unknown."""
    gpus = []
    for index in range(nvml.device_count()):
        handle: Any = None
        uuid = pci = None
        try:
            handle = nvml.handle(index)
            uuid = nvml.uuid(handle)
            pci = nvml.pci_bus_id(handle)
        except NvmlError as exc:
            log.warning("GPU %d: cannot read its identity: %s", index, exc)
        gpus.append(GpuInfo(index, handle, uuid, pci))
    return gpus


class _Lost(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _read(gpu: GpuInfo, metric: str, call: Callable[[], Any]) -> Any:
    """One metric: None when unsupported or failing; _Lost when the GPU is gone."""
    if metric in gpu.unsupported:
        return None
    try:
        return call()
    except NvmlGpuLost as exc:
        raise _Lost(f"{metric}: {exc}") from None
    except NvmlNotSupported:
        gpu.unsupported.add(metric)
        log.info("GPU %d: %s not supported, not sampled", gpu.index, metric)
    except NvmlError as exc:
        if (metric, exc.code) not in gpu.warned:
            gpu.warned.add((metric, exc.code))
            log.warning("GPU %d: reading %s failed: %s", gpu.index, metric, exc)
    return None


def _nvlink_errors(nvml: Nvml, gpu: GpuInfo) -> int | None:
    if gpu.nvlinks is None:
        links = []
        for link in range(nvml.nvlink_max_links()):
            try:
                if nvml.nvlink_active(gpu.handle, link):
                    links.append(link)
            except NvmlGpuLost:
                raise
            except NvmlError:
                continue  # not a link on this GPU
        gpu.nvlinks = links
    if not gpu.nvlinks:
        return None
    total, answered = 0, False
    for link in gpu.nvlinks:
        for counter in NVLINK_ERROR_COUNTERS:
            try:
                total += nvml.nvlink_error_counter(gpu.handle, link, counter)
                answered = True
            except NvmlGpuLost:
                raise
            except NvmlError:
                continue
    return total if answered else None


def read_sample(nvml: Nvml, gpu: GpuInfo, t: float) -> GpuSample:
    """Read every health metric of one GPU."""
    if gpu.handle is None:
        try:
            gpu.handle = nvml.handle(gpu.index)
        except NvmlError as exc:
            return GpuSample(t=t, lost=True, lost_detail=f"no handle: {exc}")
    h = gpu.handle
    try:
        remap = _read(gpu, "remapped_rows", lambda: nvml.remapped_rows(h))
        return GpuSample(
            t=t,
            ecc_uncorrected=_read(gpu, "ecc_uncorr", lambda: nvml.ecc_errors(h, corrected=False)),
            ecc_corrected=_read(gpu, "ecc_corr", lambda: nvml.ecc_errors(h, corrected=True)),
            remap_pending=None if remap is None else remap[2],
            remap_failure=None if remap is None else remap[3],
            temp_c=_read(gpu, "temperature", lambda: nvml.temperature(h)),
            temp_shutdown_c=_read(gpu, "temp_shutdown", lambda: nvml.temperature_shutdown(h)),
            clocks_reasons=_read(gpu, "clocks_reasons", lambda: nvml.clocks_event_reasons(h)),
            pcie_replays=_read(gpu, "pcie_replays", lambda: nvml.pcie_replay_counter(h)),
            nvlink_errors=_read(gpu, "nvlink_errors", lambda: _nvlink_errors(nvml, gpu)),
        )  # fmt: skip
    except _Lost as lost:
        return GpuSample(t=t, lost=True, lost_detail=f"GPU lost ({lost.detail})")


class NvmlSource:
    """`Source` over NVML: `run(sink)` blocks until `close()`."""

    name = "nvml"

    def __init__(
        self,
        nvml: Nvml,
        node: str,
        *,
        interval_s: float = 10.0,
        thresholds: HealthThresholds | None = None,
        wait_timeout_ms: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = wall_ms,
        hang_timeout_s: float = DEFAULT_HANG_TIMEOUT_S,
    ) -> None:
        self.timed = TimedNvml(nvml, hang_timeout_s)
        self.nvml: Nvml = self.timed
        self.node = node
        self.interval_s = interval_s
        self.thresholds = thresholds or HealthThresholds()
        self.wait_timeout_ms = wait_timeout_ms
        self.clock = clock
        self.now_ms = now_ms
        self.gpus: list[GpuInfo] = []
        self.trackers: dict[int, HealthTracker] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.samples = 0  # sampling rounds done (for tests and logs)
        self._watch_error: BaseException | None = None

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    def stuck(self) -> str | None:
        """Why NVML is hung (a call past the watchdog's timeout), or None (the heartbeat)."""
        return self.timed.stuck_detail()

    def request_sample(self) -> None:
        self._wake.set()

    def start(self) -> list[GpuInfo]:
        """Enumerate the GPUs (NVML must be initialized)."""
        self.gpus = enumerate_gpus(self.nvml)
        self.trackers = {g.index: HealthTracker(self.thresholds) for g in self.gpus}
        return self.gpus

    def run(self, sink: Sink) -> None:
        if not self.gpus:
            self.start()
        watcher = threading.Thread(
            target=self._watch_guarded, args=(sink,), name="nvml-xid-events", daemon=True
        )
        watcher.start()
        watchdog = NvmlWatchdog(self.timed, self.node, sink, self.now_ms)
        watchdog.start()
        try:
            while not self._stop.is_set():
                self._wake.clear()  # a request arriving while we sample wakes the next round
                self.sample_once(sink)
                self._wake.wait(self.interval_s)
        finally:
            self._stop.set()
            watchdog.stop()
            watcher.join(timeout=(self.wait_timeout_ms / 1000.0) + 5.0)
        if self._watch_error is not None:
            raise RuntimeError("the NVML XID event thread failed") from self._watch_error

    def sample_once(self, sink: Sink) -> None:
        t = self.clock()
        for gpu in self.gpus:
            for change in self.trackers[gpu.index].update(read_sample(self.nvml, gpu, t)):
                sink(
                    GpuHealth(
                        node=self.node,
                        ts_ms=self.now_ms(),
                        condition=change.condition,
                        gpu_index=gpu.index,
                        severity=change.severity,
                        detail=change.detail,
                        metrics=change.metrics or None,
                        gpu_uuid=gpu.uuid,
                        pci_bus_id=gpu.pci_bus_id,
                    )
                )
        self.samples += 1

    # -- XID events ------------------------------------------------------------------------
    def _watch_guarded(self, sink: Sink) -> None:
        """A failure of the event thread stops the whole source (never a silent half-agent)."""
        try:
            self._watch_xids(sink)
        except BaseException as exc:  # noqa: BLE001 - re-raised by run()
            self._watch_error = exc
            self.close()

    def _watch_xids(self, sink: Sink) -> None:
        try:
            event_set = self.nvml.event_set_create()
        except NvmlError as exc:
            log.warning("NVML event set not available, XID events not watched: %s", exc)
            return
        try:
            registered = self._register(event_set)
            if registered:
                self._wait_loop(event_set, sink)
            else:
                log.warning("no GPU delivers XID events through NVML; health sampling only")
        finally:
            try:
                self.nvml.event_set_free(event_set)
            except NvmlError as exc:
                log.debug("freeing the NVML event set: %s", exc)

    def _register(self, event_set: Any) -> int:
        n = 0
        for gpu in self.gpus:
            if gpu.handle is None:
                continue
            try:
                self.nvml.register_xid_events(gpu.handle, event_set)
                n += 1
            except NvmlGpuLost:
                self.request_sample()
            except NvmlError as exc:
                log.warning("GPU %d: XID events not available: %s", gpu.index, exc)
        return n

    def _wait_loop(self, event_set: Any, sink: Sink) -> None:
        by_uuid = {g.uuid: g for g in self.gpus if g.uuid}
        lost_reported = False
        while not self._stop.is_set():
            try:
                event = self.nvml.event_wait(event_set, self.wait_timeout_ms)
            except NvmlTimeout:
                lost_reported = False
                continue
            except NvmlGpuLost as exc:
                if not lost_reported:
                    log.warning("NVML event wait: %s; sampling now to find the lost GPU", exc)
                    self.request_sample()
                    lost_reported = True
                self._stop.wait(
                    self.wait_timeout_ms / 1000.0
                )  # it fails again until the GPU is back
                continue
            except NvmlError as exc:
                log.warning("NVML event wait failed: %s", exc)
                self._stop.wait(self.wait_timeout_ms / 1000.0)
                continue
            lost_reported = False
            if event is not None:
                sink(self._xid_record(event, by_uuid.get(event.device_uuid or "")))
                if event.xid == 79:
                    self.request_sample()

    def _xid_record(self, event: NvmlXidEvent, gpu: GpuInfo | None) -> GpuXid:
        message = None
        if event.gpu_instance_id is not None:
            message = f"MIG GPU-I:{event.gpu_instance_id} GPU-CI:{event.compute_instance_id}"
        return GpuXid(
            node=self.node,
            xid=event.xid,
            ts_ms=self.now_ms(),
            gpu_index=gpu.index if gpu else None,
            gpu_uuid=event.device_uuid,
            pci_bus_id=gpu.pci_bus_id if gpu else None,
            message=message,
            source="nvml",
        )
